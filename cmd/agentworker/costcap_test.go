package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestDayCapAcrossReplicas: four serve processes run 100 builds of one
// project at once, every model call costing a dollar, under a daily cap of
// $300. Every task pauses at the cap with a budget_exceeded item, and the
// spend overshoots the cap by at most one call per running task (each may
// have had one in flight when the cap was reached). The owner raises the
// cap through the API: every task resumes and finishes.
func TestDayCapAcrossReplicas(t *testing.T) {
	t.Parallel()
	const (
		tasks   = 100
		perProc = 25 // WORKER_CONCURRENCY: every task runs at once
		capUSD  = 300
		secret  = "serve-day-cap-test-secret-0123456789"
	)
	e := newProcEnv(t)
	var raised atomic.Bool
	var calls atomic.Int64
	// Each call costs 1,000 tokens, a dollar at a dollar per 1,000; the
	// builds write a file a call until the cap is raised, then finish.
	e.llm = llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		n := calls.Add(1)
		r := llmtest.Call("write_file", map[string]string{"path": fmt.Sprintf("f%d.txt", n), "content": "x\n"})
		if raised.Load() {
			r = llmtest.Call("finish", map[string]string{"summary": "done"})
		}
		r.Usage = &llm.Usage{PromptTokens: 500, CompletionTokens: 500, TotalTokens: 1000}
		r.Delay = 20 * time.Millisecond
		return r
	}))
	e.env = append(e.env, "LLM_PRICES="+llmtest.Model+"=1:1", fmt.Sprintf("PROJECT_MAX_COST_USD_PER_DAY=%d", capUSD),
		fmt.Sprintf("WORKER_CONCURRENCY=%d", perProc), "MAX_ITERATIONS=1000", "RUN_COMMAND=off", "JWT_SECRET="+secret)
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i == 3 { // the one the test calls
			e.env = append(e.env, fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port))
		}
		e.start(t, 30*time.Second)
	}

	project := uuid.New()
	ids := make([]uuid.UUID, tasks)
	for i := range ids {
		task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: fmt.Sprintf("write files %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = task.ID
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := e.pool.QueryRow(t.Context(), q, project).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	poll.Until(t, "every task paused at the cap", 180*time.Second, func() bool {
		return count(`SELECT count(*) FROM ai_tasks WHERE project_id = $1 AND status = 'paused'`) == tasks
	})
	if n := count(`SELECT count(*) FROM inbox_items WHERE project_id = $1 AND reason = 'budget_exceeded' AND status = 'open'`); n != tasks {
		t.Errorf("open budget_exceeded items = %d, want one per task (%d)", n, tasks)
	}
	var spent, taskCost float64
	if err := e.pool.QueryRow(t.Context(), `SELECT (SELECT sum(cost)::float8 FROM project_day_spend WHERE project_id = $1),
		(SELECT sum(cost)::float8 FROM ai_tasks WHERE project_id = $1)`, project).Scan(&spent, &taskCost); err != nil {
		t.Fatal(err)
	}
	made := calls.Load()
	t.Logf("cap $%d, spent $%.0f in %d calls by %d tasks", capUSD, spent, made, tasks)
	if spent != float64(made) || taskCost != spent {
		t.Errorf("the day's spend $%v, the tasks' cost $%v, the model's calls %d: want all equal (a dollar a call)", spent, taskCost, made)
	}
	if spent < capUSD || spent > capUSD+tasks {
		t.Errorf("spent $%v under a cap of $%d: want at least the cap and at most one call ($1) per running task over it", spent, capUSD)
	}
	var content string
	if err := e.pool.QueryRow(t.Context(), `SELECT content FROM inbox_items WHERE project_id = $1 AND reason = 'budget_exceeded' LIMIT 1`,
		project).Scan(&content); err != nil || !strings.Contains(content, "spent today") {
		t.Errorf("an item says %q (%v), want how much was spent", content, err)
	}

	// The owner raises the cap: every task resumes and finishes.
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := verifier.Sign(auth.Claims{Projects: []string{project.String()},
		RegisteredClaims: jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	raised.Store(true)
	poll.Until(t, "the API to take the new cap", 30*time.Second, func() bool {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, fmt.Sprintf("http://127.0.0.1:%d/v1/projects/%s/settings", port, project),
			strings.NewReader(`{"max_cost_usd_per_day": 10000}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false // still starting
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH settings: %s", resp.Status)
		}
		return true
	})
	poll.Until(t, "every task to succeed after the cap was raised", 180*time.Second, func() bool {
		return count(`SELECT count(*) FROM ai_tasks WHERE project_id = $1 AND status = 'succeeded'`) == tasks
	})
	if n := count(`SELECT count(*) FROM inbox_items WHERE project_id = $1 AND reason = 'budget_exceeded' AND status = 'open'`); n != 0 {
		t.Errorf("%d budget_exceeded items still open after the tasks resumed", n)
	}
}
