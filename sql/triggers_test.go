package sql_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// The claim reads its event floor and its project's day cap once each
	// (plpgsql, so counted here).
	want := map[string]int{"agentworker_claim_task": 1, "agentworker_event_floor": 1, "agentworker_day_cap": 1,
		"ai_tasks_guard_status": 1, "task_runs_guard_status": 1}
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

// TestUpdateGuardsNameTheirColumns: a BEFORE UPDATE trigger of ai_tasks
// with a WHEN clause names the columns it watches (UPDATE OF). Postgres
// parses a trigger's WHEN clause again for every statement it may fire
// on; an update that sets none of the columns (an event batch, a
// checkpoint, a finish: several a build) skips a trigger with columns
// before that. Four guards without columns cost each such update of the
// task row 30-50 µs.
func TestUpdateGuardsNameTheirColumns(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rows, err := pool.Query(t.Context(), `SELECT tgname FROM pg_trigger
		WHERE tgrelid = 'ai_tasks'::regclass AND NOT tgisinternal AND tgqual IS NOT NULL
		  AND tgtype & 16 <> 0 AND tgtype & 2 <> 0 AND tgtype & 1 <> 0 -- UPDATE, BEFORE, ROW
		  AND cardinality(tgattr::int2[]) = 0
		ORDER BY tgname`)
	if err != nil {
		t.Fatal(err)
	}
	unnamed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(unnamed) > 0 {
		t.Errorf("BEFORE UPDATE triggers of ai_tasks with a WHEN clause and no columns: %v", unnamed)
	}
}

// TestMachineColumnsAreTheWorkers: an INSERT or UPDATE by anyone but the
// worker that sets a column of the machine (attempt and retry counters,
// the seq counter, the lease and its holder, the run's job, the events
// archive's mark) is refused
// with check_violation (23514) naming ai_tasks_machine_columns, and
// service_role has no privilege on those columns at all (42501).
func TestMachineColumnsAreTheWorkers(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	refused := func(t *testing.T, err error, code string) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != code || code == "23514" && pgErr.ConstraintName != "ai_tasks_machine_columns" {
			t.Errorf("got %v, want SQLSTATE %s", err, code)
		}
	}
	t.Run("Insert", func(t *testing.T) {
		t.Parallel()
		for _, set := range []string{"attempt = 3", "retries = -1000", "last_seq = 41", "fence = 7", "river_job_id = 1",
			"lease_owner = 'me'", "lease_expires_at = now() + interval '10 years'",
			"events_archive_key = '_archive/x/y.jsonl.gz'", "events_archived_seq = 3", "events_archived_at = now()"} {
			col, val, _ := strings.Cut(set, " = ")
			_, err := pool.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, `+col+`) VALUES ($1, 'chat', 'x', `+val+`)`, uuid.New())
			refused(t, err, "23514")
		}
	})
	t.Run("Update", func(t *testing.T) {
		t.Parallel()
		task, _ := claimed(t, pool)
		queued, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			id  uuid.UUID
			set string
		}{
			{task.ID, "attempt = attempt + 1"},
			{task.ID, "retries = -1000"},
			{task.ID, "last_seq = 41"},
			{task.ID, "fence = fence + 1"},
			{task.ID, "river_job_id = 12345"},
			{task.ID, "lease_owner = 'someone else'"},
			{task.ID, "lease_expires_at = now() + interval '10 years'"},
			{queued.ID, "status = 'running', lease_expires_at = now() + interval '10 years'"},
			// The archive's: an app could hide a timeline or point a task at another's archive.
			{task.ID, "events_archive_key = '_archive/x/y.jsonl.gz'"},
			{task.ID, "events_archived_seq = 3"},
			{task.ID, "events_archived_at = now()"},
		} {
			_, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET `+tt.set+` WHERE id = $1`, tt.id)
			refused(t, err, "23514")
		}
		after, err := agentsql.GetTask(t.Context(), pool, task.ID)
		if err != nil || after.Attempt != task.Attempt || after.Fence != task.Fence {
			t.Errorf("task after the refused updates = %+v, %v", after, err)
		}
		// What an app may change still changes.
		if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET prompt = 'y' WHERE id = $1`, queued.ID); err != nil {
			t.Errorf("update of the prompt: %v", err)
		}
	})
	t.Run("ServiceRoleColumnPrivileges", func(t *testing.T) {
		t.Parallel()
		task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			stmt string
			code string
		}{
			{`UPDATE ai_tasks SET retries = 0 WHERE id = $1`, "42501"},
			{`UPDATE ai_tasks SET lease_expires_at = NULL WHERE id = $1`, "42501"},
			{`UPDATE ai_tasks SET last_seq = 0 WHERE id = $1`, "42501"},
			{`UPDATE ai_tasks SET events_archived_seq = 0 WHERE id = $1`, "42501"},
			{`UPDATE ai_tasks SET events_archive_key = NULL WHERE id = $1`, "42501"},
			{`INSERT INTO ai_tasks (id, project_id, type, prompt, attempt) VALUES (gen_random_uuid(), $1, 'chat', 'x', 0)`, "42501"},
			{`UPDATE ai_tasks SET prompt = 'z' WHERE id = $1`, ""},
		} {
			err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(t.Context(), `SET LOCAL ROLE service_role`); err != nil {
					return err
				}
				arg := any(task.ID)
				if strings.HasPrefix(tt.stmt, "INSERT") {
					arg = uuid.New()
				}
				_, err := tx.Exec(t.Context(), tt.stmt, arg)
				return err
			})
			if tt.code == "" {
				if err != nil {
					t.Errorf("%s as service_role: %v", tt.stmt, err)
				}
				continue
			}
			refused(t, err, tt.code)
		}
	})
}
