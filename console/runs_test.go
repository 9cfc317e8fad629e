package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestRunsChartInChromium: the Runs tab draws the project's runs per day by
// status from the runs summary of real runs — two chat tasks that succeed
// (the provider makes the first call wait for its rate limit) and one that
// fails — with the groups' tokens, cost, durations and waits beside it; a
// task's view shows its trace id and its tree's spend beside its own.
func TestRunsChartInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	var calls atomic.Int64
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		if calls.Add(1) == 1 {
			return llmtest.Error(http.StatusTooManyRequests, "1")
		}
		return llmtest.Text("hello")
	}))
	var ids []uuid.UUID
	for _, prompt := range []string{"say hello", "say hello again", ""} { // an empty prompt fails
		rp := c.api(t, http.MethodPost, "/v1/projects/"+c.project.String()+"/tasks", fmt.Sprintf(`{"type": "chat", "prompt": %q}`, prompt))
		var v api.TaskView
		if err := json.Unmarshal(rp, &v); err != nil {
			t.Fatalf("create task: %v: %s", err, rp)
		}
		ids = append(ids, v.ID)
	}
	for _, id := range ids {
		poll.Until(t, "task "+id.String()+" ends", 60*time.Second, func() bool {
			task, err := agentsql.GetTask(t.Context(), c.pool, id)
			return err == nil && task.Status.Terminal()
		})
	}
	var summary api.RunSummary
	if err := json.Unmarshal(c.api(t, http.MethodGet, "/v1/projects/"+c.project.String()+"/runs/summary?days=30", ""), &summary); err != nil {
		t.Fatal(err)
	}

	ctx := browse(t, 90*time.Second)
	today := time.Now().UTC().Format(time.DateOnly)
	bar := func(status string) string {
		return fmt.Sprintf(`document.querySelector('#runs-chart rect.run-bar[data-day="%s"][data-status="%s"]')`, today, status)
	}
	run(t, ctx, "open the runs view",
		chromedp.Navigate(c.page()),
		visible(`#tab-runs`),
		click(`#tab-runs`),
		visible(`#runs-chart rect.run-bar.failed`),
	)
	var got struct {
		Succeeded, Failed       string
		SucceededH, FailedH     float64
		Days, Runs, Total       string
		Rows                    int
		WaitText                string
		SucceededTip, FailedTip string
	}
	eval(t, ctx, `(() => {
		const s = `+bar("succeeded")+`, f = `+bar("failed")+`, chart = document.getElementById("runs-chart");
		const row = [...document.querySelectorAll("#runs tr.run-group")].find(r => r.dataset.status === "succeeded");
		return {
			succeeded: s.dataset.runs, failed: f.dataset.runs,
			succeededH: s.height.baseVal.value, failedH: f.height.baseVal.value,
			days: chart.dataset.days, runs: chart.dataset.runs, total: document.getElementById("runs-total").textContent,
			rows: document.querySelectorAll("#runs tr.run-group").length,
			waitText: row.querySelector(".wait").textContent,
			succeededTip: s.querySelector("title").textContent, failedTip: f.querySelector("title").textContent,
		};
	})()`, &got)
	if got.Succeeded != "2" || got.Failed != "1" || got.Days != "30" || got.Runs != "3" {
		t.Errorf("chart: succeeded %q, failed %q runs today over %q days, %q in all; want 2, 1, 30, 3", got.Succeeded, got.Failed, got.Days, got.Runs)
	}
	if got.SucceededH <= got.FailedH || got.FailedH <= 0 {
		t.Errorf("bar heights: succeeded %v, failed %v; want the larger count taller", got.SucceededH, got.FailedH)
	}
	if got.Rows != len(summary.Groups) || !strings.Contains(got.Total, "3 runs") {
		t.Errorf("table has %d rows for %d groups; total %q", got.Rows, len(summary.Groups), got.Total)
	}
	var waited int64
	for _, g := range summary.Groups {
		waited += g.RateLimitWaitMS
	}
	if waited < 1000 || !strings.HasPrefix(got.WaitText, "waited ") || !strings.Contains(got.Total, "waiting for the provider's rate limit") {
		t.Errorf("rate-limit wait: summary %d ms, row %q, total %q; want the second waited shown", waited, got.WaitText, got.Total)
	}
	if !strings.Contains(got.SucceededTip, "succeeded: 2 runs") || !strings.Contains(got.FailedTip, "failed: 1 run") {
		t.Errorf("tooltips %q, %q", got.SucceededTip, got.FailedTip)
	}
	screenshot(t, ctx, "runs-chart")

	// A task's view names the trace of the request that created it, and
	// the spend of its tree beside its own (a child that spent 1,000 tokens).
	task, err := agentsql.GetTask(t.Context(), c.pool, ids[0])
	if err != nil || task.TraceID == "" {
		t.Fatalf("task %s: trace %q, %v; want the create's", ids[0], task.TraceID, err)
	}
	var child uuid.UUID
	if err := c.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status, parent_task_id)
		VALUES ($1, 'chat', 'a child', 'paused', $2) RETURNING id`, c.project, task.ID).Scan(&child); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(t.Context(), `UPDATE ai_tasks SET tokens_in = 600, tokens_out = 400, cost = 0.5 WHERE id = $1`, child); err != nil {
		t.Fatal(err)
	}
	tree := fmt.Sprintf("tree of 2 tasks: %d tokens", task.TokensIn+task.TokensOut+1000)
	run(t, ctx, "open a task",
		click(fmt.Sprintf(`tr.task-row[data-id="%s"]`, task.ID)),
		until(fmt.Sprintf(`document.getElementById("task-meta").textContent.includes("trace %s")`, task.TraceID)),
		until(fmt.Sprintf(`document.getElementById("task-meta").textContent.includes(%q)`, tree)),
	)
	screenshot(t, ctx, "task-tree-spend")
}
