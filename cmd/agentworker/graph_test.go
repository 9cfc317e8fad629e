package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestPlanExpandsOnceThroughAKill: the serve process running an expanding
// plan is killed (SIGKILL) at the moment of success, with the transaction
// that records the success half done: the plan's tasks created, the run
// not yet closed (held on the run's row). Another process takes the plan over and finishes it:
// the plan has exactly one set of children.
func TestPlanExpandsOnceThroughAKill(t *testing.T) {
	t.Parallel()
	plan, err := json.Marshal(handlers.Plan{Summary: "Two tasks.", Steps: []handlers.PlanStep{}, Tasks: []handlers.PlanTask{
		{Key: "t1", Title: "Build", Prompt: "build it", Type: "build", Priority: 1, DependsOn: []string{}},
		{Key: "t2", Title: "Review", Prompt: "review it", Type: "chat", Priority: 2, DependsOn: []string{"t1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := newProcEnv(t)
	// Whatever the attempt, the structured call gets the plan, any other a
	// short answer.
	e.llm = llmtest.NewWith(t, scripted.Func(func(req *scripted.Request) scripted.Reply {
		if strings.Contains(string(req.Body), `"json_schema"`) {
			// Late enough for the test to hold the task's row first.
			return scripted.Reply{Delay: 2 * time.Second, Content: string(plan)}
		}
		return llmtest.Text("Build it, then review it.")
	}))
	const lease = 2 * time.Second
	first := e.start(t, lease)
	project := uuid.New()
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: project, Type: "plan", Prompt: "build and review", Input: json.RawMessage(`{"expand": true}`)})
	if err != nil {
		t.Fatal(err)
	}
	structured := func() bool {
		for _, req := range e.llm.Requests() {
			if strings.Contains(string(req.Body), `"json_schema"`) {
				return true
			}
		}
		return false
	}
	poll.Until(t, "the plan's structured call", 30*time.Second, structured)

	// Hold the run's row: the finish's transaction writes its events and
	// creates the plan's tasks, then waits on it to close the run.
	hold, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(t.Context(), `SELECT 1 FROM task_runs WHERE task_id = $1 FOR SHARE`, task.ID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the finish to wait on the held run, its children made", 60*time.Second, func() bool {
		var waiting bool
		err := e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%UPDATE task_runs%')`).Scan(&waiting)
		return err == nil && waiting
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// Postgres notices a dead client only when it reads or writes its
	// socket: the backend waiting on the held row would, once granted,
	// run what the killed process had already sent, its COMMIT included
	// (it did, in one run of several). End it as the server's
	// client_connection_check_interval would, then release the row.
	if _, err := e.pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%UPDATE task_runs%'`); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the killed process's waiting backend to end", 10*time.Second, func() bool {
		var waiting bool
		err := e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%UPDATE task_runs%')`).Scan(&waiting)
		return err == nil && !waiting
	})
	if err := hold.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	var children int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE parent_task_id = $1`, task.ID).Scan(&children); err != nil || children != 0 {
		t.Fatalf("after the kill: %d children (%v), want none: the killed transaction must have created nothing", children, err)
	}

	e.start(t, lease)
	poll.Until(t, "the plan to succeed on the second process", 90*time.Second, func() bool { return e.task(t, task.ID).Status == agentsql.StatusSucceeded })
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE parent_task_id = $1`, task.ID).Scan(&children); err != nil || children != 2 {
		t.Fatalf("the plan has %d children (%v), want one set of 2", children, err)
	}
	if runs := e.runs(t, task.ID); !strings.Contains(runs, "succeeded@") || strings.Count(runs, "succeeded@") != 1 {
		t.Errorf("runs = %s, want exactly one succeeded", runs)
	}
}
