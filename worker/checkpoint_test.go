package worker_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// insertWithInput inserts a task with an input object, as an app would.
func (h *harness) insertWithInput(t *testing.T, taskType, prompt string, input any) (uuid.UUID, uuid.UUID) {
	t.Helper()
	body, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	projectID := uuid.New()
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input) VALUES ($1, $2, $3, $4) RETURNING id`,
		projectID, taskType, prompt, body).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id, projectID
}

func (h *harness) waitStatus(t *testing.T, id uuid.UUID, want agentsql.Status) {
	t.Helper()
	poll.Until(t, "status "+string(want), 30*time.Second, func() bool { return h.status(t, id) == want })
}

func (h *harness) openItems(t *testing.T, id uuid.UUID, reason string) []agentsql.InboxItem {
	t.Helper()
	rows, err := h.pool.Query(t.Context(), `SELECT title, content FROM inbox_items WHERE task_id = $1 AND reason = $2 AND status = 'open'`, id, reason)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var items []agentsql.InboxItem
	for rows.Next() {
		var it agentsql.InboxItem
		if err := rows.Scan(&it.Title, &it.Content); err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	return items
}

// assertNoRepeats checks that every model request continued the previous
// one: an attempt that resumed from a checkpoint sent no conversation again.
func assertNoRepeats(t *testing.T, reqs []scripted.Request) {
	t.Helper()
	for i := 1; i < len(reqs); i++ {
		if len(reqs[i].Messages) <= len(reqs[i-1].Messages) {
			t.Errorf("request %d has %d messages, request %d had %d: a finished iteration was repeated",
				i+1, len(reqs[i].Messages), i, len(reqs[i-1].Messages))
		}
	}
}

func TestPauseAtIterationBoundaryThenResume(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		scripted.Reply{Delay: time.Second, ToolCalls: llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a\n"}).ToolCalls},
		llmtest.Call("finish", map[string]string{"summary": "wrote a.txt"}),
	)})
	projectID := uuid.New()
	id := h.insertTask(t, projectID, "build", "write a.txt")
	poll.Until(t, "the model call", 10*time.Second, func() bool { return len(h.llm.Requests()) == 1 })

	res, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionPause, agentsql.ControlOpts{Actor: "tester"})
	if err != nil || !res.Pending || res.Status != agentsql.StatusRunning {
		t.Fatalf("pause of a running task = %+v, %v; want pending", res, err)
	}
	requested := time.Now()
	h.waitStatus(t, id, agentsql.StatusPaused)
	t.Logf("pause requested → paused at the iteration boundary: %s (the model call in flight took 1 s)", time.Since(requested))
	if got := h.runStatuses(t, id); got != "interrupted" {
		t.Errorf("runs = %s, want interrupted", got)
	}
	if got := len(h.llm.Requests()); got != 1 {
		t.Errorf("model calls before resume = %d, want 1", got)
	}
	var iteration int
	var entries int
	if err := h.pool.QueryRow(t.Context(), `SELECT (SELECT iteration FROM task_checkpoints WHERE task_id = $1),
		(SELECT count(*) FROM change_set_entries WHERE task_id = $1)`, id).Scan(&iteration, &entries); err != nil || iteration != 1 || entries != 1 {
		t.Fatalf("checkpoint at iteration %d, %d staged changes, %v; want 1 and 1", iteration, entries, err)
	}
	poll.Until(t, "the paused job to complete", 5*time.Second, func() bool { return h.jobState(t, id) == "completed" })

	task, _ := agentsql.GetTask(t.Context(), h.pool, id)
	v := task.Version
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionResume, agentsql.ControlOpts{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	_, task = h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded || task.Attempt != 2 {
		t.Fatalf("after resume: status %s attempt %d, error %s", task.Status, task.Attempt, task.Error)
	}
	if got := h.runStatuses(t, id); got != "interrupted,succeeded" {
		t.Errorf("runs = %s", got)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Errorf("model calls = %d, want 2: the resumed attempt continues from the checkpoint", len(reqs))
	}
	assertNoRepeats(t, reqs)
	if content, _, err := h.store.Read(t.Context(), projectID.String(), "a.txt"); err != nil || string(content) != "a\n" {
		t.Errorf("a.txt = %q, %v", content, err)
	}
	var runs, tokens int64
	if err := h.pool.QueryRow(t.Context(), `SELECT runs, tokens_in + tokens_out FROM usage_daily WHERE model = $1`, llmtest.Model).Scan(&runs, &tokens); err != nil || runs != 2 || tokens == 0 {
		t.Errorf("usage_daily for %s: %d runs, %d tokens, %v", llmtest.Model, runs, tokens, err)
	}
	var leftover int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM task_checkpoints WHERE task_id = $1`, id).Scan(&leftover); err != nil || leftover != 0 {
		t.Errorf("checkpoints left after success = %d, %v", leftover, err)
	}
}

// A pause requested as the task is claimed (the request raced the claim)
// stops it at its first iteration boundary, before any model call: the
// claim reads the request and hands it to that boundary.
func TestPauseRequestedAtClaimStopsBeforeTheFirstModelCall(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(llmtest.Call("finish", map[string]string{"summary": "never asked"}))})
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, pause_requested)
		VALUES ($1, 'build', 'pause me', true) RETURNING id`, uuid.New()).Scan(&id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(t, id, agentsql.StatusPaused)
	if got := len(h.llm.Requests()); got != 0 {
		t.Errorf("model calls = %d, want 0", got)
	}
	if got := h.runStatuses(t, id); got != "interrupted" {
		t.Errorf("runs = %s, want interrupted", got)
	}
}

func TestRequestInputRoundTrip(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Call("request_input", map[string]string{"question": "Which colour should the banner be?"}),
		llmtest.Call("write_file", map[string]string{"path": "banner.txt", "content": "blue\n"}),
		llmtest.Call("finish", map[string]string{"summary": "blue banner"}),
	)})
	id, projectID := h.insertWithInput(t, "build", "make a banner", map[string]any{})
	h.waitStatus(t, id, agentsql.StatusAwaitingInput)
	items := h.openItems(t, id, "question")
	if len(items) != 1 || items[0].Content != "Which colour should the banner be?" {
		t.Fatalf("open question items = %+v", items)
	}
	if got := h.runStatuses(t, id); got != "interrupted" {
		t.Errorf("runs = %s, want interrupted", got)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionAnswer, agentsql.ControlOpts{Answer: "blue", Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model calls = %d, want 3", len(reqs))
	}
	assertNoRepeats(t, reqs)
	ask := reqs[0].Messages // the conversation the question was asked in
	second := reqs[1].Messages
	last := second[len(second)-1]
	askCall := second[len(ask)].ToolCalls[0]
	if last.Role != llm.RoleTool || last.ToolCallID != askCall.ID || !strings.Contains(last.Content, `"answer":"blue"`) {
		t.Errorf("resumed conversation ends with %+v; want the answer as the result of %s", last, askCall.ID)
	}
	if content, _, err := h.store.Read(t.Context(), projectID.String(), "banner.txt"); err != nil || string(content) != "blue\n" {
		t.Errorf("banner.txt = %q, %v", content, err)
	}
}

// TestBudgetCeilingHoldsAgainstInput: whoever inserts a task cannot give
// it more than the operator's MAX_ITERATIONS through input.budget.
func TestBudgetCeilingHoldsAgainstInput(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		maxIterations: 1,
		responder: scripted.Queue(
			llmtest.Call("write_file", map[string]string{"path": "one.txt", "content": "1\n"}),
			llmtest.Call("finish", map[string]string{"summary": "one file"}),
		),
	})
	id, _ := h.insertWithInput(t, "build", "write a file", map[string]any{"budget": map[string]any{"max_iterations": 50}})
	h.waitStatus(t, id, agentsql.StatusPaused)
	if got := len(h.llm.Requests()); got != 1 {
		t.Errorf("model calls = %d, want 1 (the ceiling), not the 50 the input asked for", got)
	}
	items := h.openItems(t, id, handlers.ReasonBudget)
	if len(items) != 1 || !strings.Contains(items[0].Content, "operator's ceiling") {
		t.Fatalf("open budget items = %+v", items)
	}
}

func TestBudgetPausesTheTask(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder: scripted.Queue(
			llmtest.Call("write_file", map[string]string{"path": "one.txt", "content": "1\n"}),
			llmtest.Call("write_file", map[string]string{"path": "two.txt", "content": "2\n"}),
			llmtest.Call("finish", map[string]string{"summary": "two files"}),
		),
		// A dollar per 1,000 tokens either way: any call spends the budget.
		prices: llm.Prices{llmtest.Model: {InPer1K: 1, OutPer1K: 1}},
	})
	id, projectID := h.insertWithInput(t, "build", "write two files", map[string]any{"budget": map[string]any{"max_cost_usd": 0.001}})
	h.waitStatus(t, id, agentsql.StatusPaused)
	items := h.openItems(t, id, handlers.ReasonBudget)
	if len(items) != 1 || !strings.Contains(items[0].Content, "cost budget") {
		t.Fatalf("open budget items = %+v", items)
	}
	var code string
	var runCost, taskCost float64
	if err := h.pool.QueryRow(t.Context(), `SELECT r.error_code, r.cost::float8, t.cost::float8 FROM task_runs r JOIN ai_tasks t ON t.id = r.task_id
		WHERE r.task_id = $1`, id).Scan(&code, &runCost, &taskCost); err != nil {
		t.Fatal(err)
	}
	if code != "budget_max_cost" || runCost <= 0 || taskCost != runCost {
		t.Errorf("run code %s, run cost %v, task cost %v", code, runCost, taskCost)
	}
	if got := len(h.llm.Requests()); got != 1 {
		t.Errorf("model calls before the pause = %d, want 1", got)
	}

	// Raise the budget and resume: the task continues where it stopped.
	if _, err := h.pool.Exec(t.Context(), `UPDATE ai_tasks SET input = '{"budget": {"max_cost_usd": 100}}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionResume, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if items := h.openItems(t, id, handlers.ReasonBudget); len(items) != 0 {
		t.Errorf("budget items still open after resume: %+v", items)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Errorf("model calls = %d, want 3", len(reqs))
	}
	assertNoRepeats(t, reqs)
	var res handlers.Result
	if err := json.Unmarshal(task.Result, &res); err != nil || res.CostUSD <= 0 || task.Cost < res.CostUSD-1e-6 {
		t.Errorf("result cost %v, task cost %v, %v", res.CostUSD, task.Cost, err)
	}
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, _, err := h.store.Read(t.Context(), projectID.String(), f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestStuckAlertFromTheLoop(t *testing.T) {
	t.Parallel()
	same := llmtest.Call("read_file", map[string]string{"path": "missing.txt"})
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Call("list_files", "{}"), same, llmtest.Call("list_files", "{}"), same,
	)})
	id := h.insertTask(t, uuid.New(), "build", "loop forever")
	evs, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusFailed {
		t.Fatalf("status = %s", task.Status)
	}
	var alerts []string
	for _, l := range payloadsOf[events.Log](t, evs) {
		if kind, ok := l.Metadata["alert"].(string); ok {
			alerts = append(alerts, kind)
		}
	}
	if strings.Join(alerts, ",") != handlers.AlertRepeat {
		t.Errorf("alerts = %v, want one %s", alerts, handlers.AlertRepeat)
	}
	if items := h.openItems(t, id, handlers.AlertRepeat); len(items) != 1 || items[0].Title != "Task looks stuck" {
		t.Errorf("open stuck_repeat items = %+v, want one", items)
	}
}

// TestProjectDayCapPausesTheTask: at its project's daily cap a task pauses
// before its next model call, with a budget_exceeded item saying what was
// spent; the reconciler resumes it when the UTC day turns, and raising the
// cap resumes it too.
func TestProjectDayCapPausesTheTask(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder: scripted.Queue(
			llmtest.Call("write_file", map[string]string{"path": "one.txt", "content": "1\n"}),
			llmtest.Call("write_file", map[string]string{"path": "two.txt", "content": "2\n"}),
			llmtest.Call("finish", map[string]string{"summary": "two files"}),
		),
		// A dollar per 1,000 tokens either way: any call reaches the cap.
		prices:       llm.Prices{llmtest.Model: {InPer1K: 1, OutPer1K: 1}},
		dayCap:       0.001,
		workerConfig: worker.Config{ReconcileInterval: 100 * time.Millisecond},
	})
	id, projectID := h.insertWithInput(t, "build", "write two files", map[string]any{})
	h.waitStatus(t, id, agentsql.StatusPaused)
	if got := len(h.llm.Requests()); got != 1 {
		t.Errorf("model calls before the pause = %d, want 1", got)
	}
	var spent float64
	if err := h.pool.QueryRow(t.Context(), `SELECT cost::float8 FROM ai_tasks WHERE id = $1`, id).Scan(&spent); err != nil {
		t.Fatal(err)
	}
	items := h.openItems(t, id, handlers.ReasonBudgetExceeded)
	if want := fmt.Sprintf("$%.4f spent today", spent); len(items) != 1 || !strings.Contains(items[0].Content, want) || spent <= 0 {
		t.Fatalf("open budget_exceeded items = %+v, want one saying %q", items, want)
	}
	var code string
	if err := h.pool.QueryRow(t.Context(), `SELECT error_code FROM task_runs WHERE task_id = $1 AND attempt = 1`, id).Scan(&code); err != nil {
		t.Fatal(err)
	}
	if code != handlers.CodeDayCap {
		t.Errorf("run code %s, want %s", code, handlers.CodeDayCap)
	}

	// The UTC day turns (the day's spend becomes yesterday's): the
	// reconciler resumes the task, which spends the new day's cap on one
	// call and pauses again.
	if _, err := h.pool.Exec(t.Context(), `UPDATE project_day_spend SET day = day - 1 WHERE project_id = $1`, projectID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a second model call after the day turned", 30*time.Second, func() bool { return len(h.llm.Requests()) == 2 })
	h.waitStatus(t, id, agentsql.StatusPaused)
	if items := h.openItems(t, id, handlers.ReasonBudgetExceeded); len(items) != 1 {
		t.Fatalf("open budget_exceeded items after the second pause = %+v", items)
	}

	// The owner raises the project's cap: the task resumes and finishes.
	raised := 100.0
	if err := agentsql.SetProjectSettings(t.Context(), h.pool, agentsql.ProjectSettings{ProjectID: projectID, MaxCostUSDPerDay: &raised}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ResumeUnderCap(t.Context(), h.pool, 0.001, projectID); err != nil {
		t.Fatal(err)
	}
	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if items := h.openItems(t, id, handlers.ReasonBudgetExceeded); len(items) != 0 {
		t.Errorf("budget_exceeded items still open: %+v", items)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Errorf("model calls = %d, want 3", len(reqs))
	}
	assertNoRepeats(t, reqs)
}

// TestOverTheDayCapBeforeTheFirstCall: a task of a project already past
// the operator's daily cap pauses before its first model call, whether the
// claim was given the cap (it sums the day's spend) or only the runner has
// it (the first call reads the spend itself: the claim summed none).
func TestOverTheDayCapBeforeTheFirstCall(t *testing.T) {
	t.Parallel()
	for _, runnerOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("runnerOnly=%t", runnerOnly), func(t *testing.T) {
			t.Parallel()
			h := setup(t, setupOpts{responder: scripted.Queue(llmtest.Call("finish", map[string]string{"summary": "done"})),
				dayCap: 0.5, dayCapRunnerOnly: runnerOnly})
			project := uuid.New()
			var earlier uuid.UUID
			if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', 'paused') RETURNING id`,
				project).Scan(&earlier); err != nil {
				t.Fatal(err)
			}
			if _, err := h.pool.Exec(t.Context(), `UPDATE ai_tasks SET cost = 1 WHERE id = $1`, earlier); err != nil {
				t.Fatal(err)
			}
			id := h.insertTask(t, project, "build", "write a file")
			h.waitStatus(t, id, agentsql.StatusPaused)
			if got := len(h.llm.Requests()); got != 0 {
				t.Errorf("model calls of a project past its cap = %d, want 0", got)
			}
			if items := h.openItems(t, id, handlers.ReasonBudgetExceeded); len(items) != 1 || !strings.Contains(items[0].Content, "$1.0000 spent today") {
				t.Errorf("open budget_exceeded items = %+v, want one saying $1.0000 spent today", items)
			}
		})
	}
}

// TestProjectOwnCapPausesTheTask: with no operator's cap, a project's own
// cap (set by its owner) pauses its task before the next model call.
func TestProjectOwnCapPausesTheTask(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder: scripted.Queue(
			llmtest.Call("write_file", map[string]string{"path": "one.txt", "content": "1\n"}),
			llmtest.Call("finish", map[string]string{"summary": "one file"}),
		),
		prices: llm.Prices{llmtest.Model: {InPer1K: 1, OutPer1K: 1}},
	})
	projectID, cap := uuid.New(), 0.001
	if err := agentsql.SetProjectSettings(t.Context(), h.pool, agentsql.ProjectSettings{ProjectID: projectID, MaxCostUSDPerDay: &cap}); err != nil {
		t.Fatal(err)
	}
	id := h.insertTask(t, projectID, "build", "write a file")
	h.waitStatus(t, id, agentsql.StatusPaused)
	if got := len(h.llm.Requests()); got != 1 {
		t.Errorf("model calls before the pause = %d, want 1", got)
	}
	if items := h.openItems(t, id, handlers.ReasonBudgetExceeded); len(items) != 1 {
		t.Fatalf("open budget_exceeded items = %+v", items)
	}
}
