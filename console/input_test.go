package console_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestTaskInputInChromium: the task form sets a new task's input — expand
// for a plan, review, a budget and allowed paths for a build — and its
// parent; the server's refusal of a bad input is shown, and nothing is
// created.
func TestTaskInputInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		return llmtest.Call("finish", map[string]string{"summary": "noted"})
	}))
	ctx := browse(t, 90*time.Second)
	chooseType := func(typ string) chromedp.Action[chromedp.Void] {
		return until(`(() => { const s = document.getElementById("type"); s.value = "` + typ + `"; s.dispatchEvent(new Event("change")); return true; })()`)
	}
	stored := func(id string) (input map[string]any, parent string) {
		t.Helper()
		var raw []byte
		var p *uuid.UUID
		if err := c.pool.QueryRow(t.Context(), `SELECT coalesce(input, '{}'), parent_task_id FROM ai_tasks WHERE id = $1`, id).Scan(&raw, &p); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &input); err != nil {
			t.Fatal(err)
		}
		if p != nil {
			parent = p.String()
		}
		return input, parent
	}

	run(t, ctx, "open the form's input", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`),
		click(`#task-input summary`), chooseType("plan"), visible(`#in-expand`), click(`#in-expand`))
	var reviewShown bool
	eval(t, ctx, `document.getElementById("in-review").offsetParent !== null`, &reviewShown)
	if reviewShown {
		t.Errorf("a plan's form offers review, which only a build takes")
	}
	plan := submitBuild(t, ctx, "plan the release", chooseType("plan"))
	if input, _ := stored(plan); !reflect.DeepEqual(input, map[string]any{"expand": true}) {
		t.Errorf("the plan's input = %v, want expand", input)
	}

	run(t, ctx, "fill a build's input", chooseType("build"), visible(`#in-review`), click(`#in-review`),
		keys(`#budget-tokens`, "5000"), keys(`#budget-cost`, "0.5"), keys(`#budget-iterations`, "8"),
		keys(`#allowed-paths`, "src/**, docs/*.md"),
		until(`document.querySelector('#parent option[value="`+plan+`"]')`), setValue(`#parent`, plan))
	screenshot(t, ctx, "task-input-form")
	build := submitBuild(t, ctx, "build the release")
	input, parent := stored(build)
	want := map[string]any{"review": true, "allowed_paths": []any{"src/**", "docs/*.md"},
		"budget": map[string]any{"max_tokens": 5000.0, "max_cost_usd": 0.5, "max_iterations": 8.0}}
	if !reflect.DeepEqual(input, want) || parent != plan {
		t.Errorf("the build's input = %v with parent %q; want %v with parent %s", input, parent, want, plan)
	}
	var cleared string
	eval(t, ctx, `document.getElementById("allowed-paths").value + document.getElementById("budget-tokens").value + document.getElementById("input-summary").textContent`, &cleared)
	if cleared != "" {
		t.Errorf("after the build was created the input fields hold %q", cleared)
	}

	var before int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, c.project).Scan(&before); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "a path outside the project is refused", keys(`#allowed-paths`, "../etc"), keys(`#prompt`, "escape"), click(`#submit`),
		until(`document.getElementById("message").textContent.includes("allowed_paths")`))
	var msg string
	eval(t, ctx, `document.getElementById("message").textContent`, &msg)
	var after int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, c.project).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before || !strings.Contains(msg, "../etc") {
		t.Errorf("refused input: %d tasks created, the page says %q", after-before, msg)
	}
	screenshot(t, ctx, "task-input-refused")
}
