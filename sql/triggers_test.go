package sql_test

import (
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// A claim and a finish call only the status triggers that have something
// to do: each call of a plpgsql function costs more than the update itself.
func TestStatusTriggersCalledOnlyWhenTheyAct(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// calls runs fn in a transaction and returns the plpgsql functions it
	// called, and how often.
	calls := func(fn func(tx pgx.Tx) error) map[string]int {
		t.Helper()
		got := map[string]int{}
		// The view holds what this backend has not yet reported, which
		// may include earlier transactions: the difference is fn's.
		read := func(tx pgx.Tx, sign int) error {
			rows, err := tx.Query(ctx, "SELECT funcname, calls FROM pg_stat_xact_user_functions")
			if err != nil {
				return err
			}
			for rows.Next() {
				var name string
				var n int
				if err := rows.Scan(&name, &n); err != nil {
					return err
				}
				if got[name] += sign * n; got[name] == 0 {
					delete(got, name)
				}
			}
			return rows.Err()
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL track_functions = 'pl'"); err != nil {
				return err
			}
			if err := read(tx, -1); err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				return err
			}
			return read(tx, 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	var fence agentsql.Fence
	got := calls(func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(ctx, tx, task.ID, 1, "w", time.Minute)
		fence = agentsql.Fence{TaskID: task.ID, Epoch: c.Task.Fence}
		return err
	})
	want := map[string]int{"agentworker_claim_task": 1, "ai_tasks_guard_status": 1, "task_runs_guard_status": 1}
	if !maps.Equal(got, want) {
		t.Errorf("a claim called %v, want %v", got, want)
	}

	got = calls(func(tx pgx.Tx) error {
		_, err := agentsql.FinishTask(ctx, tx, fence, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: []byte(`{"summary":"done"}`)})
		return err
	})
	for _, name := range []string{"ai_tasks_guard_status", "ai_tasks_clear_pause", "ai_tasks_drop_checkpoint", "ai_tasks_inbox_completed", "task_runs_guard_status"} {
		if got[name] != 1 {
			t.Errorf("a finish called %s %d times, want once (all: %v)", name, got[name], got)
		}
	}
	if got["ai_tasks_requeue"] != 0 {
		t.Errorf("a finish called ai_tasks_requeue (all: %v)", got)
	}
	var inbox int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM inbox_items WHERE task_id = $1", task.ID).Scan(&inbox); err != nil || inbox != 1 {
		t.Fatalf("inbox items of the finished task: %d (%v), want 1", inbox, err)
	}
}
