package handlers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestDependencySummaries: a task that waited for a build is given, in
// its first prompt, the build's result summary and the files it changed.
func TestDependencySummaries(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "src/banner.ts", "content": "export const banner = 'hi'\n"}),
		llmtest.Text("Added the banner component in src/banner.ts."),
		llmtest.Text("The banner is there."),
	}, handlers.Config{}, map[string]string{"a.txt": "a\n"})
	build, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeBuild, Prompt: "add a banner\nwith details"})
	if err != nil {
		t.Fatal(err)
	}
	review, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeChat,
		Prompt: "check the banner", DependsOn: []uuid.UUID{build.ID}})
	if err != nil {
		t.Fatal(err)
	}
	_, task := h.wait(t, review.ID)
	result(t, task)
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	if sys := reqs[0].Messages[0].Content; strings.Contains(sys, "What the tasks this one depends on did") {
		t.Errorf("the build, which depends on nothing, was given dependencies: %q", sys)
	}
	sys := reqs[2].Messages[0].Content
	for _, want := range []string{
		"## What the tasks this one depends on did",
		"### build task " + build.ID.String() + ": add a banner\n",
		"Summary: Added the banner component in src/banner.ts.",
		"Files changed: src/banner.ts (create)",
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("the dependent's system prompt lacks %q:\n%s", want, sys)
		}
	}
}

// docRow is a documents row as the tests compare it.
type docRow struct {
	title     string
	mandatory bool
	etag      string
	problem   string
	updatedAt time.Time
}

func (h *harness) documents(t *testing.T) map[string]docRow {
	t.Helper()
	rows, err := agentsql.ListDocuments(t.Context(), h.pool, h.project, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]docRow{}
	for _, d := range rows {
		out[d.Path] = docRow{d.Title, d.Mandatory, d.ETag, d.Problem, d.UpdatedAt}
	}
	return out
}

// TestDocumentsInContext: a task's context refreshes the documents index
// from the project's files: a mandatory document's text is in the system
// prompt, the others are listed by path and title only, a malformed front
// matter is indexed with its problem and does not fail the task, a
// sensitive file never counts. The next task re-reads only the document
// whose etag changed and drops the row of the one deleted.
func TestDocumentsInContext(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{llmtest.Text("first"), llmtest.Text("second")}, handlers.Config{}, map[string]string{
		"docs/style.md":       "---\ntitle: House style\nmandatory: true\n---\nAlways name errors after what failed.\n",
		"docs/guide/setup.md": "---\ntitle: Setup\ntags: [ops]\n---\nRun make setup first.\n",
		"docs/bad.md":         "---\ntitle: [unclosed\n---\nBad body text.\n",
		"docs/.env.md":        "SECRET=hunter2\n",
		"AGENTS.md":           "Root rules.\n",
		"src/a.ts":            "export {}\n",
	})
	first := h.insert(t, "chat", "what are the rules?", nil)
	_, task := h.wait(t, first)
	result(t, task)
	sys := h.llm.Requests()[0].Messages[0].Content
	for _, want := range []string{
		"## The project's documents",
		"### House style (docs/style.md, mandatory)\nAlways name errors after what failed.\n",
		"- docs/guide/setup.md: Setup (tags: ops)\n",
		"- docs/bad.md: bad\n",
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("the system prompt lacks %q:\n%s", want, sys)
		}
	}
	for _, unwanted := range []string{"Run make setup first.", "Bad body text.", "hunter2", "- docs/.env.md:", "- AGENTS.md:", "title: House style"} {
		if strings.Contains(sys, unwanted) {
			t.Errorf("the system prompt holds %q, which only a listed, sensitive or rules document has:\n%s", unwanted, sys)
		}
	}
	before := h.documents(t)
	if len(before) != 4 || !before["docs/style.md"].mandatory || before["AGENTS.md"].title != "AGENTS" ||
		!strings.Contains(before["docs/bad.md"].problem, "malformed front matter") {
		t.Fatalf("documents after the first task: %+v", before)
	}

	// Setup changes, bad goes; style stays as it was.
	info, err := h.store.Write(t.Context(), h.project.String(), "docs/guide/setup.md", []byte("---\ntitle: Setup, revised\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.Delete(t.Context(), h.project.String(), "docs/bad.md"); err != nil {
		t.Fatal(err)
	}
	second := h.insert(t, "chat", "and now?", nil)
	_, task = h.wait(t, second)
	result(t, task)
	after := h.documents(t)
	if _, ok := after["docs/bad.md"]; ok || len(after) != 3 {
		t.Errorf("documents after the delete: %+v, want docs/bad.md gone", after)
	}
	if s := after["docs/guide/setup.md"]; s.title != "Setup, revised" || s.etag != info.ETag || s.etag == before["docs/guide/setup.md"].etag {
		t.Errorf("changed document's row %+v, want the new title at etag %s", s, info.ETag)
	}
	if s := after["docs/style.md"]; s != before["docs/style.md"] {
		t.Errorf("unchanged document's row was rewritten: %+v, was %+v", s, before["docs/style.md"])
	}
	if sys := h.llm.Requests()[1].Messages[0].Content; !strings.Contains(sys, "- docs/guide/setup.md: Setup, revised\n") || strings.Contains(sys, "docs/bad.md") {
		t.Errorf("the second system prompt does not show the change:\n%s", sys)
	}
}

// TestBuildReindexesDocuments: a build that writes a document updates the
// documents index once its change set is applied, without another task.
func TestBuildReindexesDocuments(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "docs/adr/001.md", "content": "---\ntitle: Use Postgres\ntype: adr\nmandatory: true\n---\nWe use Postgres.\n"}),
		llmtest.Text("Recorded the decision."),
	}, handlers.Config{}, map[string]string{"docs/old.md": "# Old\n"})
	id := h.insert(t, "build", "record the decision", nil)
	_, task := h.wait(t, id)
	result(t, task)
	var docs map[string]docRow
	poll.Until(t, "the new document indexed", 30*time.Second, func() bool {
		docs = h.documents(t)
		return docs["docs/adr/001.md"].title == "Use Postgres"
	})
	if !docs["docs/adr/001.md"].mandatory || docs["docs/old.md"].title != "Old" {
		t.Errorf("documents after the build: %+v", docs)
	}
}

// TestContextBudgetEdge: the context (tasks view, documents, dependency
// summaries) at exactly its budget, and one byte under it, is whole; one
// byte over it, the first thing trimmed is the tasks view, and nothing
// else is.
func TestContextBudgetEdge(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"tasks.md":      "# Tasks\n- [ ] TASKS-VIEW-START " + strings.Repeat("v", 300) + " TASKS-VIEW-END\n",
		"docs/style.md": "---\ntitle: Style\nmandatory: true\n---\nSTYLE-START " + strings.Repeat("s", 300) + " STYLE-END\n",
		"docs/guide.md": "# Guide\nnot inlined\n",
		"src/main.ts":   "export {}\n",
	}
	// contextOf runs a task that depends on another under budget and
	// returns the context part of its system prompt (the prompt's tail)
	// and the log event of its timeline saying what was trimmed, if any.
	contextOf := func(t *testing.T, budget int) (string, string) {
		t.Helper()
		h := setup(t, []scripted.Reply{llmtest.Text("DEP-SUMMARY " + strings.Repeat("d", 200)), llmtest.Text("done")},
			handlers.Config{ContextBudget: budget, TasksView: "tasks.md"}, files)
		dep, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeChat, Prompt: "look around"})
		if err != nil {
			t.Fatal(err)
		}
		task, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeChat,
			Prompt: "go on", DependsOn: []uuid.UUID{dep.ID}})
		if err != nil {
			t.Fatal(err)
		}
		evs, done := h.wait(t, task.ID)
		result(t, done)
		var trimLog string
		for _, ev := range evs {
			if p, err := ev.Decode(); err == nil {
				if l, ok := p.(*events.Log); ok && strings.Contains(l.Message, "context was trimmed") {
					trimLog = l.Message
				}
			}
		}
		sys := h.llm.Requests()[1].Messages[0].Content
		i := strings.Index(sys, "\n\n## The project's task list")
		if i < 0 {
			t.Fatalf("no context in the system prompt:\n%s", sys)
		}
		// The dependency's id is each run's own: the same length, one text.
		return strings.ReplaceAll(sys[i:], dep.ID.String(), strings.Repeat("x", len(dep.ID.String()))), trimLog
	}
	whole, _ := contextOf(t, 1<<20)
	for _, want := range []string{"TASKS-VIEW-END", "STYLE-END", "- docs/guide.md: Guide", "DEP-SUMMARY"} {
		if !strings.Contains(whole, want) {
			t.Fatalf("the whole context lacks %q:\n%s", want, whole)
		}
	}
	n := len(whole)
	for _, tt := range []struct {
		name    string
		budget  int
		trimmed bool
	}{{"OneByteUnder", n + 1, false}, {"AtTheBudget", n, false}, {"OneByteOver", n - 1, true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, trimLog := contextOf(t, tt.budget)
			if len(got) > tt.budget {
				t.Errorf("context of %d bytes over its budget of %d", len(got), tt.budget)
			}
			if want := fmt.Sprintf("the task's context was trimmed to its budget of %d bytes: tasks view", tt.budget); tt.trimmed != (trimLog == want) {
				t.Errorf("trim log event %q; want %q: %v", trimLog, want, tt.trimmed)
			}
			if !tt.trimmed {
				if got != whole {
					t.Errorf("a context of %d bytes within a budget of %d was changed:\n%s", n, tt.budget, got)
				}
				return
			}
			if strings.Contains(got, "TASKS-VIEW-START") || !strings.Contains(got, "tasks.md is left out for room") {
				t.Errorf("over the budget, the tasks view is not what was trimmed:\n%s", got)
			}
			for _, want := range []string{"STYLE-END", "- docs/guide.md: Guide", "DEP-SUMMARY"} {
				if !strings.Contains(got, want) {
					t.Errorf("trimming the tasks view took %q too:\n%s", want, got)
				}
			}
		})
	}
}
