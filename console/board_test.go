package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/console"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// hostile is text a project member may type where the page shows it: it
// must stay text.
const hostile = `<img src=x onerror="document.body.dataset.xss=1">`

// chainModel plays the agent of TestBoardInChromium: each step writes its
// file and finishes; the first waits for the test's signal before it
// writes, so its dependents are seen waiting.
func chainModel(gate <-chan struct{}) scripted.Responder {
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		last, prompt := req.LastUserMessage()
		step := 0
		for _, m := range req.Messages[last+1:] {
			step += len(m.ToolCalls)
		}
		name := strings.Fields(prompt)[0]
		if name == "first" && step == 0 {
			select {
			case <-gate:
			case <-time.After(90 * time.Second):
			}
		}
		switch step {
		case 0:
			return llmtest.Call("write_file", map[string]string{"path": name + ".txt", "content": name + "\n"})
		case 1:
			return llmtest.Call("finish", map[string]string{"summary": "wrote " + name + ".txt"})
		}
		return scripted.Reply{Status: 400, ErrorMessage: fmt.Sprintf("no step %d for prompt %q", step, prompt)}
	})
}

// TestBoardInChromium drives the board and the agents' editor as an
// operator: two agents created in the page (one named with markup), a
// chain of three tasks with agents, priorities and dependencies created in
// the page, the dependents seen waiting and then, live, succeeded in order;
// an agent edited, refused on a stale version and on a taken name,
// disabled and deleted; markup shown as text everywhere.
func TestBoardInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	gate := make(chan struct{})
	var opened bool
	openGate := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	t.Cleanup(openGate)
	c := newConsole(t, chainModel(gate))
	ctx := browse(t, 150*time.Second)
	js := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	agentRow := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll("#agents li.agent-row")].find(li => li.querySelector(".agent-name").textContent === %s)`, js(name))
	}
	agentID := func(name string) string {
		t.Helper()
		var id string
		eval(t, ctx, agentRow(name)+`.dataset.id`, &id)
		return id
	}
	createAgent := func(name, role, persona string) string {
		t.Helper()
		run(t, ctx, "create agent "+name,
			click(`#agent-new`),
			setValue(`#agent-form input[name="name"]`, name),
			setValue(`#agent-form input[name="role"]`, role),
			setValue(`#agent-form textarea[name="persona"]`, persona),
			click(`#agent-save`),
			until(agentRow(name)),
		)
		return agentID(name)
	}
	card := func(column, id string) string {
		return fmt.Sprintf(`#board .board-col[data-column="%s"] li.card[data-id="%s"]`, column, id)
	}
	submit := func(prompt, agent, priority string, deps ...string) string {
		t.Helper()
		return submitBuild(t, ctx, prompt, append([]chromedp.Action[chromedp.Void]{choose(`#agent`, agent), choose(`#priority`, priority)}, dependOn(deps...)...)...)
	}

	run(t, ctx, "open the console", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`),
		click(`#tab-agents`), visible(`#agent-form`))
	planner := createAgent(hostile, "plans "+hostile, "You are "+hostile)
	reviewer := createAgent("reviewer", "reviews", "You are careful.")
	plannerRow := fmt.Sprintf(`#agents li.agent-row[data-id="%s"]`, planner)

	run(t, ctx, "open the dependency picker", click(`#deps summary`))
	first := submit("first step: write first.txt", planner, "1")
	second := submit("second step: write second.txt", reviewer, "3", first)
	third := submit("third step: write third.txt\nmore lines", "", "2", second)
	run(t, ctx, "the dependents wait",
		visible(card("running", first)),
		visible(card("waiting", second)),
		visible(card("waiting", third)),
	)
	type cardText struct {
		ID, Title, Agent, Priority string
		Deps                       []string
	}
	var cards map[string]cardText
	eval(t, ctx, `Object.fromEntries([...document.querySelectorAll("#board li.card")].map(c => [c.dataset.id, {
		ID: c.querySelector(".card-id").textContent, Title: c.querySelector(".card-title").textContent,
		Agent: c.querySelector(".card-agent").textContent, Priority: c.querySelector(".prio").textContent,
		Deps: [...c.querySelectorAll(".card-deps .dep")].map(d => d.textContent) }]))`, &cards)
	for _, want := range []struct {
		id string
		cardText
	}{
		{first, cardText{first[:8], "first step: write first.txt", hostile, "P1", []string{}}},
		{second, cardText{second[:8], "second step: write second.txt", "reviewer", "P3", []string{"first step: write first.txt · " + first[:8]}}},
		{third, cardText{third[:8], "third step: write third.txt", "default agent", "P2", []string{"second step: write second.txt · " + second[:8]}}},
	} {
		if got := cards[want.id]; fmt.Sprint(got) != fmt.Sprint(want.cardText) {
			t.Errorf("card %s = %+v, want %+v", want.id, got, want.cardText)
		}
	}
	screenshot(t, ctx, "board-waiting")

	// An agent with an unfinished task stays; the page says why.
	run(t, ctx, "delete a busy agent",
		click(plannerRow),
		visible(`#agent-delete`),
		click(`#agent-delete`),
		visible(`#agent-error[data-code="AGENT_HAS_TASKS"]`),
	)

	openGate()
	run(t, ctx, "the chain succeeds, live",
		visible(card("succeeded", first)),
		visible(card("succeeded", second)),
		visible(card("succeeded", third)),
	)
	screenshot(t, ctx, "board-succeeded")
	// The task view names the middle task's agent and both its neighbours.
	run(t, ctx, "open the middle task", click(card("succeeded", second)), visible(fmt.Sprintf(`body[data-task="%s"]`, second)),
		until(`document.getElementById("task-relations").textContent.includes("before")`))
	var relations string
	eval(t, ctx, `document.getElementById("task-relations").textContent`, &relations)
	// Related tasks are named by their titles, not bare ids.
	if want := fmt.Sprintf("agent reviewer · priority 3 · after first step: write first.txt · %s · before third step: write third.txt · %s", first[:8], third[:8]); relations != want {
		t.Errorf("task relations = %q, want %q", relations, want)
	}
	// In order: each started after the one it depends on finished.
	var order bool
	if err := c.pool.QueryRow(t.Context(), `SELECT b.started_at >= a.finished_at AND c.started_at >= b.finished_at
		FROM ai_tasks a, ai_tasks b, ai_tasks c WHERE a.id = $1 AND b.id = $2 AND c.id = $3`, first, second, third).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if !order {
		t.Error("the chain did not run in order")
	}

	// Edit an agent; a concurrent edit makes the page's version stale.
	reviewerRow := fmt.Sprintf(`#agents li.agent-row[data-id="%s"]`, reviewer)
	run(t, ctx, "edit the reviewer",
		click(reviewerRow),
		until(`document.querySelector("#agent-form").dataset.id === `+js(reviewer)),
		setValue(`#agent-form input[name="role"]`, "reviews every change"),
		click(`#agent-save`),
		visible(reviewerRow+`[data-version="2"]`),
	)
	c.patchAgent(t, reviewer, `{"persona":"edited elsewhere","expected_version":2}`)
	run(t, ctx, "a stale edit is refused",
		setValue(`#agent-form input[name="role"]`, "overwrites"),
		click(`#agent-save`),
		visible(`#agent-error[data-code="AGENT_VERSION_CONFLICT"]`),
		visible(reviewerRow+`[data-version="3"]`),
		click(reviewerRow),
		until(`document.querySelector("#agent-form textarea[name=persona]").value === "edited elsewhere"`),
		setValue(`#agent-form input[name="role"]`, "reviews, again"),
		click(`#agent-save`),
		visible(reviewerRow+`[data-version="4"]`),
	)
	var agentErr, role string
	eval(t, ctx, `document.querySelector("#agent-error").textContent`, &agentErr)
	eval(t, ctx, `document.querySelector('`+reviewerRow+` .agent-role').textContent`, &role)
	if agentErr != "" || role != "reviews, again" {
		t.Errorf("after the second save: error %q, role %q", agentErr, role)
	}
	// The reviewer's builds wait for review: the editor's box sets it.
	run(t, ctx, "the reviewer's builds wait for review",
		click(`#agent-form input[name="review"]`),
		click(`#agent-save`),
		visible(reviewerRow+`[data-version="5"]`),
		until(`document.querySelector('`+reviewerRow+` .meta').textContent.includes("review")`),
	)
	var review bool
	if err := c.pool.QueryRow(t.Context(), `SELECT review FROM agents WHERE id = $1`, reviewer).Scan(&review); err != nil || !review {
		t.Errorf("the reviewer's review setting after the save: %v (%v)", review, err)
	}

	// A taken name, then a disable and a delete.
	run(t, ctx, "a taken name",
		click(`#agent-new`),
		setValue(`#agent-form input[name="name"]`, "reviewer"),
		click(`#agent-save`),
		visible(`#agent-error[data-code="AGENT_NAME_TAKEN"]`),
	)
	// A refusal reads as what to do, not as the database's words.
	var taken string
	eval(t, ctx, `document.querySelector("#agent-error").textContent`, &taken)
	if taken != "This project already has an agent of that name: choose another name." {
		t.Errorf("a taken name reads %q", taken)
	}
	scratch := createAgent("scratch", "tries things", "You are temporary.")
	run(t, ctx, "disable the planner, delete scratch",
		click(plannerRow),
		until(`document.querySelector("#agent-form").dataset.id === `+js(planner)),
		click(`#agent-disable`),
		visible(plannerRow+`[data-status="disabled"]`),
		until(fmt.Sprintf(`document.querySelector('#agent option[value="%s"]:disabled')`, planner)),
		click(fmt.Sprintf(`#agents li.agent-row[data-id="%s"]`, scratch)),
		until(`document.querySelector("#agent-form").dataset.id === `+js(scratch)),
		click(`#agent-delete`),
		until(fmt.Sprintf(`!document.querySelector('#agents li.agent-row[data-id="%s"]')`, scratch)),
	)
	var left int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM agents WHERE project_id = $1`, c.project).Scan(&left); err != nil || left != 2 {
		t.Errorf("agents left: %d, %v; want 2", left, err)
	}

	// An agent disabled elsewhere, still offered by the page: the task is
	// refused and the page says why.
	c.patchAgent(t, reviewer, `{"status":"disabled","expected_version":5}`)
	run(t, ctx, "a task for a disabled agent",
		keys(`#prompt`, "fourth step: refused"),
		choose(`#agent`, reviewer),
		click(`#submit`),
		visible(`#message[data-code="INVALID_ASSIGNEE"]`),
		until(`document.getElementById("message").textContent.includes("choose another agent")`),
		until(fmt.Sprintf(`document.querySelector('#agent option[value="%s"]:disabled')`, reviewer)),
	)
	var tasks int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, c.project).Scan(&tasks); err != nil || tasks != 3 {
		t.Errorf("tasks: %d, %v; want 3", tasks, err)
	}

	// Markup is text: in the list, the editor, the agent select and the
	// card; no element was made of it, no handler ran.
	run(t, ctx, "open the planner", click(plannerRow),
		until(`document.querySelector("#agent-form").dataset.id === `+js(planner)))
	var xss struct {
		Name, Role, Option, Card, Persona string
		Images                            int
		Ran                               bool
	}
	eval(t, ctx, `({ Name: document.querySelector('`+plannerRow+` .agent-name').textContent,
		Role: document.querySelector('`+plannerRow+` .agent-role').textContent,
		Option: document.querySelector('#agent option[value="`+planner+`"]').textContent,
		Card: document.querySelector('#board li.card[data-id="`+first+`"] .card-agent').textContent,
		Persona: document.querySelector("#agent-form textarea[name=persona]").value,
		Images: document.querySelectorAll("img").length, Ran: !!document.body.dataset.xss })`, &xss)
	if xss.Name != hostile || xss.Role != "plans "+hostile || xss.Option != hostile+" (disabled)" || xss.Card != hostile ||
		xss.Persona != "You are "+hostile || xss.Images != 0 || xss.Ran {
		t.Errorf("markup rendered: %+v", xss)
	}
	screenshot(t, ctx, "board-agents")
}

// choose selects the option of a select with value v, as a person picking
// it would (chromedp's SetValue leaves no option selected for "").
func choose(sel, v string) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`(s => { s.value = %q; s.dispatchEvent(new Event("change")); return s.value === %q; })(document.querySelector(%q))`, v, v, sel))
}

// patchAgent updates an agent through the API, as another operator would.
func (c *pipeline) patchAgent(t *testing.T, id, body string) {
	t.Helper()
	c.api(t, "PATCH", "/v1/agents/"+id, body)
}

// TestBoardStateInChromium checks the board's grouping in the browser's
// own JavaScript: every status has its column (a question and a pause in
// paused and needing input together, failed and blocked together), a
// column is ordered by priority, then oldest first, with a plan's children
// together; a cancel's cascade is the open tasks depending on it.
func TestBoardStateInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open the page", chromedp.Navigate(srv.URL), chromedp.WaitReady(chromedp.CSS(`body`)))
	var got map[string][]string
	eval(t, ctx, `import("/board.js").then(({ boardColumns, cascade }) => {
		const rows = [
			{ id: "c1", status: "queued", priority: 2, created_at: "2026-01-04T00:00:00Z", parent_task_id: "plan" },
			{ id: "q-x", status: "queued", priority: 2, created_at: "2026-01-05T00:00:00Z" },
			{ id: "c2", status: "queued", priority: 3, created_at: "2026-01-04T00:00:00Z", parent_task_id: "plan" },
			{ id: "w", status: "waiting", priority: 2, created_at: "2026-01-01T00:00:00Z" },
			{ id: "q-late-p1", status: "queued", priority: 1, created_at: "2026-01-03T00:00:00Z" },
			{ id: "q-old-p4", status: "queued", priority: 4, created_at: "2026-01-01T00:00:00Z" },
			{ id: "q-old-p1", status: "queued", priority: 1, created_at: "2026-01-02T00:00:00Z" },
			{ id: "r", status: "running", priority: 2, created_at: "2026-01-01T00:00:00Z" },
			{ id: "asks", status: "awaiting_input", priority: 2, created_at: "2026-01-01T00:00:00Z" },
			{ id: "paused", status: "paused", priority: 2, created_at: "2026-01-02T00:00:00Z" },
			{ id: "ok", status: "succeeded", priority: 3, created_at: "2026-01-01T00:00:00Z" },
			{ id: "failed", status: "failed", priority: 2, created_at: "2026-01-01T00:00:00Z" },
			{ id: "blocked", status: "blocked", priority: 2, created_at: "2026-01-02T00:00:00Z" },
			{ id: "x", status: "cancelled", priority: 2, created_at: "2026-01-01T00:00:00Z" },
		];
		const graph = [
			{ id: "A", status: "running" }, { id: "B", status: "waiting", depends_on: ["A"] },
			{ id: "C", status: "waiting", depends_on: ["B"] }, { id: "D", status: "succeeded", depends_on: ["A"] },
			{ id: "E", status: "waiting", depends_on: ["D"] },
			{ id: "F", status: "queued", parent_task_id: "A" }, { id: "G", status: "waiting", depends_on: ["F"] },
			{ id: "H", status: "succeeded", parent_task_id: "A" },
		];
		return { ...Object.fromEntries([...boardColumns(rows)].map(([k, list]) => [k, list.map(t => t.id)])),
			cascade: cascade(graph, ["A"]) };
	})`, &got)
	// A plan's children stay together where the first of them goes; a
	// cancel of A blocks B and, through it, C, and cancels its open child
	// F, which blocks G.
	want := map[string][]string{"waiting": {"w"}, "queued": {"q-old-p1", "q-late-p1", "c1", "c2", "q-x", "q-old-p4"}, "running": {"r"},
		"held": {"asks", "paused"}, "review": {}, "succeeded": {"ok"}, "failed": {"failed", "blocked"}, "cancelled": {"x"},
		"cascade": {"B", "C", "F", "G"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("board columns = %v, want %v", got, want)
	}
}

// TestBoardBlockedInChromium: a failing task blocks its dependent on the
// board, and a retry from the page that succeeds releases it, live.
func TestBoardBlockedInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	var failing atomic.Bool
	failing.Store(true)
	model := scripted.Func(func(req *scripted.Request) scripted.Reply {
		last, prompt := req.LastUserMessage()
		if strings.HasPrefix(prompt, "flaky") && failing.Load() {
			return scripted.Reply{Status: http.StatusBadRequest, ErrorMessage: "the model refuses, this once"}
		}
		step := 0
		for _, m := range req.Messages[last+1:] {
			step += len(m.ToolCalls)
		}
		if step == 0 {
			return llmtest.Call("write_file", map[string]string{"path": strings.Fields(prompt)[0] + ".txt", "content": "done\n"})
		}
		return llmtest.Call("finish", map[string]string{"summary": "done"})
	})
	c := newConsole(t, model)
	ctx := browse(t, 120*time.Second)
	card := func(column, id string) string {
		return fmt.Sprintf(`#board .board-col[data-column="%s"] li.card[data-id="%s"]`, column, id)
	}
	submit := func(prompt string, deps ...string) string {
		t.Helper()
		return submitBuild(t, ctx, prompt, dependOn(deps...)...)
	}

	run(t, ctx, "open the console", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), click(`#deps summary`))
	flaky := submit("flaky step")
	dependent := submit("dependent step", flaky)
	run(t, ctx, "the failure blocks the dependent",
		visible(card("failed", flaky)+`[data-status="failed"]`),
		visible(card("failed", dependent)+`[data-status="blocked"]`),
	)
	screenshot(t, ctx, "board-blocked")
	failing.Store(false)
	run(t, ctx, "retry the failed task from its card",
		click(card("failed", flaky)),
		visible(fmt.Sprintf(`body[data-task="%s"]`, flaky)),
		enabled(`#retry`),
		click(`#retry`),
		visible(card("succeeded", flaky)),
		visible(card("succeeded", dependent)),
	)
}

// TestBoardBroadcastInChromium: an operator ticks two of three paused
// cards (in their own column, not review's) and cancels them with one
// command: the page asks first, saying that a task waiting on one of them
// is blocked too; the page reports the outcomes, those two move to the
// cancelled column, the third stays, and no box stays ticked — also after
// a command that changes nothing. A running task whose pause is pending
// reads "pausing…"; a plan's children show their planned titles under it.
func TestBoardBroadcastInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		return scripted.Reply{Status: 500, ErrorMessage: "no task of this test runs"}
	}))
	insert := func(query string, args ...any) string {
		t.Helper()
		var id string
		if err := c.pool.QueryRow(t.Context(), query, append([]any{c.project}, args...)...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, insert(`INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'build', $2, 'paused') RETURNING id`, fmt.Sprintf("paused %d", i)))
	}
	waiter, err := agentsql.InsertTask(t.Context(), c.pool, agentsql.NewTask{ProjectID: c.project, Type: "build", Prompt: "after paused 0",
		DependsOn: []uuid.UUID{uuid.MustParse(ids[0])}})
	if err != nil {
		t.Fatal(err)
	}
	// A running task no worker holds (no job: the pickup is off in its
	// transaction), asked to pause.
	tx, err := c.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
		t.Fatal(err)
	}
	pausing := dbtest.HeldBuild(t, tx, c.project, "pause me").TaskID.String()
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res, err := agentsql.ControlTask(t.Context(), c.pool, uuid.MustParse(pausing), agentsql.ActionPause, agentsql.ControlOpts{Actor: "test"}); err != nil || !res.Pending {
		t.Fatalf("pause the running task: %+v, %v", res, err)
	}
	plan := insert(`INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'plan', 'Plan the release', 'paused') RETURNING id`)
	child := insert(`INSERT INTO ai_tasks (project_id, type, prompt, status, parent_task_id, input) VALUES ($1, 'build', 'You write the changelog from the commits since…', 'paused', $2,
		'{"planned_task": {"key": "t1", "title": "Changelog"}}') RETURNING id`, plan)
	ctx := browse(t, 90*time.Second)
	card := func(column, id string) string {
		return fmt.Sprintf(`#board .board-col[data-column="%s"] li.card[data-id="%s"]`, column, id)
	}
	run(t, ctx, "open the console", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`),
		visible(card("held", ids[0])), visible(card("held", ids[1])), visible(card("held", ids[2])),
		visible(card("waiting", waiter.ID.String())), visible(card("running", pausing)+` .badge.pausing`), visible(card("held", child)+`.child`))
	var shown struct{ Pausing, Title, Parent string }
	eval(t, ctx, `({pausing: document.querySelector('`+card("running", pausing)+` .badge').textContent,
		title: document.querySelector('`+card("held", child)+` .card-title').textContent,
		parent: document.querySelector('`+card("held", child)+` .card-parent').textContent})`, &shown)
	if shown.Pausing != "pausing…" || shown.Title != "Changelog" || shown.Parent != "↳ part of Plan the release" {
		t.Errorf("cards show %+v", shown)
	}
	run(t, ctx, "tick two and cancel them",
		click(card("held", ids[0])+" input.card-pick"),
		click(card("held", ids[1])+" input.card-pick"),
		until(`document.getElementById("board-picked").textContent === "2 selected"`),
		enabled(`#board-cancel`),
		click(`#board-cancel`),
		visible(`#confirm`))
	var asked string
	eval(t, ctx, `document.getElementById("confirm-text").textContent + " | " + document.getElementById("confirm-yes").textContent`, &asked)
	if asked != "Cancel 2 tasks? 1 more task goes with it: unfinished children are cancelled, tasks waiting on a cancelled one blocked. | Cancel 3 tasks" {
		t.Errorf("the confirmation reads %q", asked)
	}
	screenshot(t, ctx, "board-cascade-confirm")
	run(t, ctx, "confirm",
		click(`#confirm-yes`),
		until(`document.body.dataset.broadcast === "cancel"`),
		visible(card("cancelled", ids[0])),
		visible(card("cancelled", ids[1])),
		visible(card("held", ids[2])),
		visible(card("failed", waiter.ID.String())+`[data-status="blocked"]`),
	)
	var result, picked string
	var ticked int
	eval(t, ctx, `document.getElementById("board-result").textContent`, &result)
	eval(t, ctx, `document.getElementById("board-picked").textContent`, &picked)
	eval(t, ctx, `document.querySelectorAll("#board input.card-pick:checked").length`, &ticked)
	if result != "cancel: 2 applied" || picked != "0 selected" || ticked != 0 {
		t.Errorf("after the command: result %q, %q, %d boxes ticked", result, picked, ticked)
	}
	run(t, ctx, "a command that changes nothing",
		click(card("held", ids[2])+" input.card-pick"),
		enabled(`#board-pause`), click(`#board-pause`),
		until(`document.body.dataset.broadcast === "pause"`),
		until(`document.getElementById("board-picked").textContent === "0 selected"`))
	eval(t, ctx, `document.querySelectorAll("#board input.card-pick:checked").length`, &ticked)
	if ticked != 0 {
		t.Errorf("%d boxes ticked after a command that changed nothing", ticked)
	}
	var opened string
	eval(t, ctx, `document.body.dataset.task || ""`, &opened)
	if opened != "" {
		t.Errorf("ticking a card opened task %s", opened)
	}
	screenshot(t, ctx, "board-broadcast")
}

// TestLogSearchInChromium: the Logs tab searches the project's log events
// through the logs route, newest first, markup shown as text, and pages on.
func TestLogSearchInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		return scripted.Reply{Status: 500, ErrorMessage: "no task of this test runs"}
	}))
	var task string
	if err := c.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status)
		VALUES ($1, 'build', 'logs', 'paused') RETURNING id`, c.project).Scan(&task); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		msg := fmt.Sprintf("disk check %d", i)
		if i == 59 {
			msg = "disk full " + hostile
		}
		if _, err := c.pool.Exec(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
			VALUES ($1, $2, 'log', jsonb_build_object('level', 'warn', 'message', $3::text))`, task, c.project, msg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.pool.Exec(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
		VALUES ($1, $2, 'log', '{"level": "info", "message": "unrelated"}')`, task, c.project); err != nil {
		t.Fatal(err)
	}
	ctx := browse(t, 90*time.Second)
	run(t, ctx, "open the logs", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`),
		click(`#tab-logs`), visible(`#log-search`))
	run(t, ctx, "search the logs", setValue(`#log-q`, "disk"), click(`#log-go`),
		until(`document.body.dataset.logs === "50" && document.querySelector("#logs li .log-message").textContent.startsWith("disk full")`))
	run(t, ctx, "read older ones", visible(`#log-more`), click(`#log-more`), until(`document.body.dataset.logs === "60"`))
	var first string
	var xss bool
	eval(t, ctx, `document.querySelector("#logs li .log-message").textContent`, &first)
	eval(t, ctx, `document.body.dataset.xss === "1"`, &xss)
	if first != "disk full "+hostile || xss {
		t.Errorf("newest log shown as %q (markup ran: %v)", first, xss)
	}
	var hidden bool
	eval(t, ctx, `document.getElementById("log-more").hidden`, &hidden)
	if !hidden {
		t.Error("Older is offered past the last page")
	}
}
