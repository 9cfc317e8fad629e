package handlers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// fixtureContext has a part of every kind, each larger than what trimming
// it leaves, so every trim makes the context smaller.
func fixtureContext() taskContext {
	doc := func(p, title string, mandatory bool) agentsql.Document {
		return agentsql.Document{Path: p, Title: title, Mandatory: mandatory, DocType: "guide"}
	}
	return taskContext{
		tasksPath: "tasks.md",
		tasksView: "# Tasks\n" + strings.Repeat("- [ ] a task of the project\n", 20),
		docs: projectDocs{
			inline: []inlineDoc{
				{doc: doc("docs/style.md", "Style", true), text: "STYLE " + strings.Repeat("s", 400)},
				{doc: doc("docs/api.md", "API", true), text: "API " + strings.Repeat("a", 400)},
			},
			listed: []agentsql.Document{doc("docs/one.md", "One", false), doc("docs/two.md", "Two", false), doc("docs/three.md", "Three", false)},
		},
		deps: []agentsql.DependencyResult{
			{ID: uuid.MustParse("00000000-0000-4000-8000-000000000001"), Type: agentsql.TypeBuild, Prompt: "first", Summary: "FIRST " + strings.Repeat("f", 300),
				Files: []agentsql.ChangedFile{{Path: "a.ts", Op: "write"}}},
			{ID: uuid.MustParse("00000000-0000-4000-8000-000000000002"), Type: agentsql.TypeChat, Title: "second", Summary: "SECOND " + strings.Repeat("g", 300)},
		},
	}
}

// trimKind is the step of the trim order a trimmed entry belongs to.
func trimKind(entry string) int {
	for i, prefix := range []string{"tasks view", "mandatory document listed", "documents left out", "dependency summary", "hard cut"} {
		if strings.HasPrefix(entry, prefix) || strings.Contains(entry, prefix) {
			return i
		}
	}
	return -1
}

// TestContextBudgetOrder walks the context down its trim order, one edge
// at a time: at each step's size exactly (and one byte over it) the
// context is that step's, one byte under it the next step trims. The
// steps come in the stated order: the tasks view, then the documents
// (mandatory ones listed, the last first, then list lines), then the
// dependency summaries (the last first), then a hard cut; the context is
// never over its budget.
func TestContextBudgetOrder(t *testing.T) {
	t.Parallel()
	c := fixtureContext()
	full, trimmed := c.render(1 << 20)
	if len(trimmed) != 0 {
		t.Fatalf("a context within its budget was trimmed: %v", trimmed)
	}
	for _, want := range []string{"## The project's task list (tasks.md)", "STYLE", "API a", "- docs/three.md: Three (guide)", "FIRST f", "SECOND g", "Files changed: a.ts (write)"} {
		if !strings.Contains(full, want) {
			t.Fatalf("the whole context lacks %q:\n%s", want, full)
		}
	}
	var kinds []int
	text, budget := full, len(full)
	for step := 0; ; step++ {
		if step > 50 {
			t.Fatal("the trim does not end")
		}
		for _, b := range []int{budget, budget + 1} {
			if got, _ := c.render(b); got != text {
				t.Fatalf("step %d: at a budget of %d bytes the context differs from the one that fits %d bytes", step, b, len(text))
			}
		}
		next, trimmed := c.render(budget - 1)
		if len(next) > budget-1 {
			t.Fatalf("step %d: context of %d bytes over its budget of %d", step, len(next), budget-1)
		}
		if len(trimmed) == 0 {
			t.Fatalf("step %d: a budget one byte under the context trimmed nothing", step)
		}
		kind := trimKind(trimmed[len(trimmed)-1])
		kinds = append(kinds, kind)
		if kind == 4 {
			if !strings.HasSuffix(next, fmt.Sprintf(contextCutNote, budget-1)) || len(next) != budget-1 {
				t.Errorf("hard cut: %d bytes, want %d ending in the cut note", len(next), budget-1)
			}
			break
		}
		text, budget = next, len(next)
	}
	for i := 1; i < len(kinds); i++ {
		if kinds[i] < kinds[i-1] {
			t.Fatalf("trim steps out of order: %v", kinds)
		}
	}
	// Each kind of step happened: the tasks view, both demotions, list
	// lines (a line or more a step: the first adds the note counting
	// them), both dependencies, the cut.
	count := map[int]int{}
	for _, k := range kinds {
		count[k]++
	}
	if count[0] != 1 || count[1] != 2 || count[2] < 1 || count[3] != 2 || count[4] != 1 {
		t.Errorf("trim steps %v: want 1 tasks view, 2 demotions, list lines, 2 dependencies, 1 cut", kinds)
	}
}

// TestContextTrimSteps shows what each step leaves.
func TestContextTrimSteps(t *testing.T) {
	t.Parallel()
	c := fixtureContext()
	full, _ := c.render(1 << 20)
	noView, _ := c.render(len(full) - 1)
	if strings.Contains(noView, "a task of the project") || !strings.Contains(noView, "tasks.md is left out for room; read it with read_file") ||
		!strings.Contains(noView, "STYLE") || !strings.Contains(noView, "API a") {
		t.Errorf("first step: want the tasks view out and both documents inlined:\n%s", noView)
	}
	demoted, _ := c.render(len(noView) - 1)
	if !strings.Contains(demoted, "STYLE") || strings.Contains(demoted, "API a") || !strings.Contains(demoted, "- docs/api.md: API (mandatory, not inlined; guide)\n") {
		t.Errorf("second step: want the last mandatory document listed instead of inlined:\n%s", demoted)
	}
	for _, tt := range []struct {
		budget int
		want   int
	}{{0, 0}, {10, 10}, {100, 100}} {
		if got, _ := c.render(tt.budget); len(got) != tt.want {
			t.Errorf("budget %d: %d bytes", tt.budget, len(got))
		}
	}
	if got, trimmed := (taskContext{}).render(0); got != "" || trimmed != nil {
		t.Errorf("an empty context: %q %v", got, trimmed)
	}
}
