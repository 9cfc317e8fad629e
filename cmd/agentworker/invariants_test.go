package main

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
)

// checkInvariants checks what must hold for a task whatever happened to
// the processes, the database and the store on its way: its events are
// gap-free and none follows its terminal event; no two of its runs
// overlap in time; a succeeded task has exactly one succeeded run.
func checkInvariants(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	var n, lo, hi int
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM agent_events WHERE task_id = $1`, id).
		Scan(&n, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if n == 0 || lo != 1 || hi != n {
		t.Errorf("task %s: %d events with seq %d..%d: want 1..%d without a gap", id, n, lo, hi, n)
	}
	task, err := agentsql.GetTask(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.Terminal() {
		var lastPhase, lastType string
		var terminals int
		if err := pool.QueryRow(ctx, `SELECT type, coalesce(payload ->> 'phase', '') FROM agent_events WHERE task_id = $1 ORDER BY seq DESC LIMIT 1`, id).
			Scan(&lastType, &lastPhase); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events WHERE task_id = $1 AND type = 'agent_phase'
			AND payload ->> 'phase' IN ('completed', 'failed', 'blocked', 'cancelled')`, id).Scan(&terminals); err != nil {
			t.Fatal(err)
		}
		if lastType != "agent_phase" || (lastPhase != "completed" && lastPhase != "failed" && lastPhase != "blocked" && lastPhase != "cancelled") {
			t.Errorf("task %s (%s): last event is %s/%s, want its terminal agent_phase", id, task.Status, lastType, lastPhase)
		}
		if terminals != 1 {
			t.Errorf("task %s (%s): %d terminal events, want 1", id, task.Status, terminals)
		}
	}
	var overlaps int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_runs a JOIN task_runs b
		ON a.task_id = b.task_id AND a.id <> b.id AND a.started_at <= b.started_at
		WHERE a.task_id = $1 AND coalesce(a.finished_at, 'infinity') > b.started_at`, id).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps != 0 {
		t.Errorf("task %s: %d pairs of runs overlap in time: it ran on two workers at once", id, overlaps)
	}
	var succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_runs WHERE task_id = $1 AND status = 'succeeded'`, id).Scan(&succeeded); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 1, false: 0}[task.Status == agentsql.StatusSucceeded]; succeeded != want {
		t.Errorf("task %s (%s): %d succeeded runs, want %d", id, task.Status, succeeded, want)
	}
}
