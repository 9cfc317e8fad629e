package sql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestFlagIdleOncePerRun(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusRunning)
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET attempt = 1, started_at = now() - interval '1 hour' WHERE id = $1`, id); err != nil {
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
