package sql_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// fetchOrder is the order River's fetch takes the task queue's jobs in
// (JobGetAvailable: available, due, by priority, scheduled_at, id), as the
// jobs' task prompts. No job waits scheduled, or available but not yet due.
func fetchOrder(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	var notDue int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM river_job
		WHERE kind = 'ai_task' AND (state = 'scheduled' OR (state = 'available' AND scheduled_at > now()))`).Scan(&notDue); err != nil {
		t.Fatal(err)
	}
	if notDue > 0 {
		t.Errorf("%d jobs not available at once (scheduled, or due later)", notDue)
	}
	return queryStrings(t, db, `SELECT t.prompt FROM river_job j JOIN ai_tasks t ON t.id::text = j.args ->> 'task_id'
		WHERE j.state = 'available' AND j.queue = 'ai_tasks' AND j.scheduled_at <= now()
		ORDER BY j.priority, j.scheduled_at, j.id`)
}

func equalOrder(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("River takes %v, want %v", got, want)
	}
}

// TestProjectsTakeTurns: River takes the queued tasks of several projects
// in turns, each project's in the order they were inserted, whether an app
// inserted them with SQL, one statement or many, or through the API's Go
// path; a more urgent priority still goes first.
func TestProjectsTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	a, b, c, d := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'chat', 'a' || g FROM generate_series(1, 5) g`, a); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"b1", "b2", "b3"} {
		if i == 1 {
			if _, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: c, Type: agentsql.TypeChat, Prompt: "c1"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', $2)`, b, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'a6')`, a); err != nil {
		t.Fatal(err)
	}
	for _, nt := range []agentsql.NewTask{
		{ProjectID: d, Type: agentsql.TypeChat, Prompt: "d-routine", Priority: 4},
		{ProjectID: d, Type: agentsql.TypeChat, Prompt: "d-urgent", Priority: 1},
	} {
		if _, err := agentsql.InsertTask(ctx, pool, nt); err != nil {
			t.Fatal(err)
		}
	}
	// b1 and c1 came with nothing of theirs queued: level with a1, after
	// it by id; then a turn each, a6 behind a's own.
	equalOrder(t, fetchOrder(t, pool), []string{"d-urgent", "a1", "b1", "c1", "a2", "b2", "a3", "b3", "a4", "a5", "a6", "d-routine"})

	// River takes the head: a newcomer goes level with the new head.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running' WHERE id IN (
		SELECT j.id FROM river_job j JOIN ai_tasks t ON t.id::text = j.args ->> 'task_id' WHERE t.prompt IN ('d-urgent', 'a1', 'b1', 'c1'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'e1'), ($1, 'chat', 'e2')`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	equalOrder(t, fetchOrder(t, pool), []string{"a2", "b2", "e1", "a3", "b3", "e2", "a4", "a5", "a6", "d-routine"})
}

// TestRequeuedAndReconciledTasksTakeTheirTurn: a task moved back to the
// queue, or enqueued by the reconciler, takes its project's turn as an
// inserted one does.
func TestRequeuedAndReconciledTasksTakeTheirTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	a, b := uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'chat', 'a' || g FROM generate_series(1, 4) g`, a); err != nil {
		t.Fatal(err)
	}
	// b1 waits for a task of its own, then is queued by the app.
	var b1 uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'b1', 'paused') RETURNING id`,
		b).Scan(&b1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET status = 'queued' WHERE id = $1`, b1); err != nil {
		t.Fatal(err)
	}
	// b2 lost its job (copied in with the pickup trigger off).
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'b2')`, b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := agentsql.EnqueueOrphans(ctx, pool, 0, time.Minute, 10); err != nil || n != 1 {
		t.Fatalf("reconciler enqueued %d (%v), want 1", n, err)
	}
	equalOrder(t, fetchOrder(t, pool), []string{"a1", "b1", "a2", "b2", "a3", "a4"})
}

// TestJobBackFromAWaitTakesItsTurn: a task's job that River makes available
// again after a snooze (a retry's wait) takes its project's turn, not the
// back of the backlog queued before its wait ended.
func TestJobBackFromAWaitTakesItsTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	a, b := uuid.New(), uuid.New()
	var b1 uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'b1') RETURNING id`, b).Scan(&b1); err != nil {
		t.Fatal(err)
	}
	// River takes b1; a's backlog arrives; b1's worker snoozes it (JobSnooze:
	// scheduled, due after the backlog's insert), and River's scheduler makes
	// it available when due, as JobSchedule does.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1 WHERE args ->> 'task_id' = $1::text`, b1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'chat', 'a' || g FROM generate_series(1, 3) g`, a); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = clock_timestamp()
		WHERE args ->> 'task_id' = $1::text`, b1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'available' WHERE state = 'scheduled' AND scheduled_at <= now()`); err != nil {
		t.Fatal(err)
	}
	// Level with the head, a1; b1's job is the older.
	equalOrder(t, fetchOrder(t, pool), []string{"b1", "a1", "a2", "a3"})
}
