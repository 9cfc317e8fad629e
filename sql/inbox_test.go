package sql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

func TestFlagIdleOncePerRun(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusRunning)
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET attempt = 1, started_at = now() - interval '1 hour'`+dbtest.AsWorker+`WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, $2, 'running')`, id, id.String()+"/1"); err != nil {
		t.Fatal(err)
	}
	busy := insertTaskIn(t, pool, agentsql.StatusRunning) // no run row: not flagged

	flagged, err := agentsql.FlagIdle(t.Context(), pool, time.Minute)
	if err != nil || len(flagged) != 1 || flagged[0] != id {
		t.Fatalf("first sweep flagged %v, %v; want %s only (not %s)", flagged, err, id, busy)
	}
	if again, err := agentsql.FlagIdle(t.Context(), pool, time.Minute); err != nil || len(again) != 0 {
		t.Fatalf("second sweep flagged %v, %v; want none while the item is open", again, err)
	}
	task, _ := agentsql.GetTask(t.Context(), pool, id)
	items, err := agentsql.ListInbox(t.Context(), pool, task.ProjectID, true, 10)
	if err != nil || len(items) != 1 || items[0].Reason != "stuck_idle" || items[0].Kind != agentsql.InboxAwaitUserInput {
		t.Fatalf("open items = %+v, %v", items, err)
	}
	var alerts int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM agent_events WHERE task_id = $1 AND payload -> 'metadata' ->> 'alert' = 'stuck_idle'`, id).Scan(&alerts); err != nil || alerts != 1 {
		t.Errorf("alert events = %d, %v", alerts, err)
	}
	if _, err := agentsql.CloseInboxItem(t.Context(), pool, items[0].ID, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.CloseInboxItem(t.Context(), pool, items[0].ID, "ops"); !errors.Is(err, agentsql.ErrInboxItemNotFound) {
		t.Errorf("closing twice: %v", err)
	}
	if again, err := agentsql.FlagIdle(t.Context(), pool, time.Minute); err != nil || len(again) != 1 {
		t.Errorf("after the item was closed: flagged %v, %v; want the run again", again, err)
	}
}

func TestOpenInboxItemDedupes(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusRunning)
	task, _ := agentsql.GetTask(t.Context(), pool, id)
	var runID uuid.UUID
	if err := pool.QueryRow(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, $2, 'running') RETURNING id`,
		id, id.String()+"/1").Scan(&runID); err != nil {
		t.Fatal(err)
	}
	it := agentsql.InboxItem{ProjectID: task.ProjectID, TaskID: &id, RunID: &runID, Kind: agentsql.InboxAwaitUserInput, Reason: "budget", Title: "Token budget reached"}
	if _, opened, err := agentsql.OpenInboxItem(t.Context(), pool, it); err != nil || !opened {
		t.Fatalf("first: opened %v, %v", opened, err)
	}
	if _, opened, err := agentsql.OpenInboxItem(t.Context(), pool, it); err != nil || opened {
		t.Fatalf("duplicate: opened %v, %v", opened, err)
	}
	it.Reason = "stuck_repeat"
	if _, opened, err := agentsql.OpenInboxItem(t.Context(), pool, it); err != nil || !opened {
		t.Fatalf("another reason: opened %v, %v", opened, err)
	}
	// A question the agent asked closes only by being answered.
	it.Reason, it.RunID = "question", nil
	q, _, err := agentsql.OpenInboxItem(t.Context(), pool, it)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.CloseInboxItem(t.Context(), pool, q.ID, "ops"); !errors.Is(err, agentsql.ErrInboxItemNotFound) {
		t.Errorf("closing a question without an answer: %v", err)
	}
}

// TestIdleCheckNeverFollowsTheTerminalEvent: the idle check runs while the
// task's holder is finishing it (its terminal event and its move out of
// running written, not yet committed). The check must not write its alert
// after the terminal event, nor open an item for a finished run.
func TestIdleCheckNeverFollowsTheTerminalEvent(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := agentsql.InsertEventBatch(ctx, tx, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch, Key: uuid.New(),
		Events: []agentsql.NewEvent{{Type: "agent_phase", Payload: []byte(`{"phase":"completed","status":"succeeded"}`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.FinishTask(ctx, tx, f, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	type flagged struct {
		ids []uuid.UUID
		err error
	}
	done := make(chan flagged, 1)
	go func() {
		ids, err := agentsql.FlagIdle(context.WithoutCancel(ctx), pool, 0)
		done <- flagged{ids, err}
	}()
	var res *flagged
	poll.Until(t, "the idle check to finish or wait for the task's row", 10*time.Second, func() bool {
		select {
		case r := <-done:
			res = &r
			return true
		default:
		}
		var waiting bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%agentworker_flag_idle%')`).Scan(&waiting)
		return waiting
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res == nil {
		r := <-done
		res = &r
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	var lastType, lastPhase string
	if err := pool.QueryRow(ctx, `SELECT type, coalesce(payload ->> 'phase', '') FROM agent_events WHERE task_id = $1 ORDER BY seq DESC LIMIT 1`,
		task.ID).Scan(&lastType, &lastPhase); err != nil {
		t.Fatal(err)
	}
	if lastType != "agent_phase" || lastPhase != "completed" {
		t.Errorf("last event of the finished task = %s %q, want the terminal agent_phase completed (idle check flagged %v)", lastType, lastPhase, res.ids)
	}
	items, err := agentsql.ListInbox(ctx, pool, task.ProjectID, true, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Reason == "stuck_idle" {
			t.Errorf("open stuck_idle item for the finished run: %+v", it)
		}
	}
}
