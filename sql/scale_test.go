package sql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/testing/dbtest"
)

// An app inserting many tasks in one statement gets one River job per task
// and one notification on River's insert channel, not one per row.
func TestPickupNotifiesOncePerStatement(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `LISTEN "`+schema+`.river_insert"`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, status)
		SELECT gen_random_uuid(), 'chat', 'x', CASE WHEN i <= 10 THEN 'queued' ELSE 'paused' END
		FROM generate_series(1, 12) i`); err != nil {
		t.Fatal(err)
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job j JOIN ai_tasks t ON t.id = (j.args->>'task_id')::uuid
		WHERE j.kind = 'ai_task' AND t.status = 'queued'`).Scan(&jobs); err != nil || jobs != 10 {
		t.Fatalf("jobs for the 10 queued tasks = %d, %v", jobs, err)
	}
	notified := 0
	for {
		wait := 5 * time.Second // for the first; then long enough to see a second
		if notified > 0 {
			wait = 300 * time.Millisecond
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		notified++
	}
	if notified != 1 {
		t.Errorf("river_insert notified %d times for one statement, want 1", notified)
	}
}

// Usage is aggregated on read from each run's own row: finishing a run
// updates no row shared with other tasks.
func TestUsageDailyAggregatesRuns(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	run := func(model string, tokensIn, tokensOut int64, cost string, finish bool) {
		t.Helper()
		var task uuid.UUID
		if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, model) VALUES (gen_random_uuid(), 'chat', 'x', $1) RETURNING id`,
			model).Scan(&task); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, started_at) VALUES ($1, 1, $2, 'running', now())`, task, task.String()); err != nil {
			t.Fatal(err)
		}
		q := `UPDATE task_runs SET tokens_in = $2, tokens_out = $3, cost = $4::numeric WHERE task_id = $1`
		if finish {
			q = `UPDATE task_runs SET tokens_in = $2, tokens_out = $3, cost = $4::numeric, status = 'succeeded', finished_at = now() WHERE task_id = $1`
		}
		if _, err := pool.Exec(ctx, q, task, tokensIn, tokensOut, cost); err != nil {
			t.Fatal(err)
		}
	}
	run("m1", 10, 5, "0.5", true)
	run("m1", 20, 7, "0.25", true)
	run("m1", 1000, 1000, "9", false) // still running: not counted yet
	run("m2", 1, 1, "0.1", true)

	rows, err := pool.Query(ctx, `SELECT model, runs, tokens_in, tokens_out, cost::text FROM usage_daily
		WHERE day = (now() AT TIME ZONE 'UTC')::date ORDER BY model`)
	if err != nil {
		t.Fatal(err)
	}
	type usage struct {
		Model         string
		Runs          int64
		TokensIn, Out int64
		Cost          string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[usage])
	if err != nil {
		t.Fatal(err)
	}
	want := []usage{{"m1", 2, 30, 12, "0.750000"}, {"m2", 1, 1, 1, "0.100000"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("usage_daily = %+v, want %+v", got, want)
	}
}
