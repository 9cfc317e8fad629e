package worker_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// TestDependentTasksRunInOrder: a chain of three tasks inserted in one
// transaction runs one after the other on a real worker, the dependents
// waiting meanwhile.
func TestDependentTasksRunInOrder(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("done") })})
	project := uuid.New()
	var ids []uuid.UUID
	err := pgx.BeginFunc(t.Context(), h.pool, func(tx pgx.Tx) error {
		for i := range 3 {
			nt := agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "step"}
			if i > 0 {
				nt.DependsOn = []uuid.UUID{ids[i-1]}
			}
			task, err := agentsql.InsertTask(t.Context(), tx, nt)
			if err != nil {
				return err
			}
			if want := map[bool]agentsql.Status{true: agentsql.StatusQueued, false: agentsql.StatusWaiting}[i == 0]; task.Status != want {
				t.Errorf("task %d inserted %s, want %s", i, task.Status, want)
			}
			ids = append(ids, task.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var prev agentsql.Task
	for i, id := range ids {
		evs, task := h.waitDone(t, id)
		if task.Status != agentsql.StatusSucceeded {
			t.Fatalf("task %d ended %s", i, task.Status)
		}
		checkSeqs(t, evs, 1)
		if i > 0 {
			if task.StartedAt.Before(*prev.FinishedAt) {
				t.Errorf("task %d started at %v, before its dependency finished at %v", i, task.StartedAt, prev.FinishedAt)
			}
			if phases := payloadsOf[events.AgentPhase](t, evs); len(phases) < 2 || phases[0].Phase != "waiting" || phases[1].Phase != "queued" {
				t.Errorf("task %d's first phases are not waiting, then queued: %+v", i, phases)
			}
		}
		prev = task
	}
}

// TestUrgentTaskOvertakes: when more tasks are ready than the worker has
// slots, a priority-1 task inserted after priority-4 ones starts first.
// The slots free one at a time: River starts the jobs of one fetch
// together, in no order (with all four freed at once the urgent task and
// two routine ones were fetched together and claimed in any order).
func TestUrgentTaskOvertakes(t *testing.T) {
	t.Parallel()
	release, done := make(chan struct{}, 4), make(chan struct{})
	h := setup(t, setupOpts{concurrency: 4, responder: scripted.Func(func(req *scripted.Request) scripted.Reply {
		if _, msg := req.LastUserMessage(); msg == "hold" {
			select {
			case <-release:
			case <-done:
			}
		}
		return llmtest.Text("done")
	})})
	// Registered after setup's, so run before them: no holder is left
	// waiting while the worker stops.
	t.Cleanup(func() { close(done) })
	project := uuid.New()
	insert := func(prompt string, priority int) uuid.UUID {
		t.Helper()
		task, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: prompt, Priority: priority})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID
	}
	for range 4 {
		insert("hold", 2)
	}
	poll.Until(t, "the four holders to fill the worker's slots", 30*time.Second, func() bool {
		var n int
		err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1 AND status = 'running'`, project).Scan(&n)
		return err == nil && n == 4
	})
	var routine []uuid.UUID
	for range 6 {
		routine = append(routine, insert("routine", 4))
	}
	urgent := insert("urgent", 1)
	release <- struct{}{} // one slot frees
	_, u := h.waitDone(t, urgent)
	for range 3 {
		release <- struct{}{}
	}
	for _, id := range routine {
		_, r := h.waitDone(t, id)
		if r.StartedAt.Before(*u.StartedAt) {
			t.Errorf("a priority-4 task started at %v, before the priority-1 task at %v", r.StartedAt, u.StartedAt)
		}
	}
}

// TestReconcilerKeepsThePriority: a task the reconciler enqueues gets its
// own priority, as one the pickup trigger enqueues does.
func TestReconcilerKeepsThePriority(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{noService: true})
	svc, err := worker.New(h.pool, nil, worker.Config{ReconcileMinAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id := h.insertWithoutJob(t, uuid.New(), "chat", "hi")
	if _, err := h.pool.Exec(t.Context(), `UPDATE ai_tasks SET priority = 4 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the reconciler to enqueue the orphan", 10*time.Second, func() bool {
		n, err := svc.Reconcile(t.Context())
		return err == nil && n == 1
	})
	var priority int
	if err := h.pool.QueryRow(t.Context(), `SELECT priority FROM river_job WHERE args ->> 'task_id' = $1::text`, id).Scan(&priority); err != nil || priority != 4 {
		t.Fatalf("the reconciled job has priority %d (%v), want the task's 4", priority, err)
	}
}
