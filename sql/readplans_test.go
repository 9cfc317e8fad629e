package sql_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestProjectReadStopsAtItsLimit: a project stream's read takes its events
// in order from the (project_id, xid, id) index and stops after limit
// rows, and tells that later events are held back by an open transaction
// from the same index: it fetches neither every later event of the project
// to sort them nor the table up to the first held one.
func TestProjectReadStopsAtItsLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	project := uuid.New()
	// 200 tasks of one project, 100 events each, written by 20 transactions;
	// a transaction that began before the last 10 holds their events back.
	if _, err := conn.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'build', 'read' FROM generate_series(1, 200)`, project); err != nil {
		t.Fatal(err)
	}
	open, err := pgx.Connect(ctx, dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close(context.WithoutCancel(ctx)) })
	for i := range 20 {
		if i == 10 {
			if _, err := open.Exec(ctx, `BEGIN; SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type)
			SELECT t.id, t.project_id, s, 'log' FROM (SELECT * FROM ai_tasks ORDER BY id LIMIT 10 OFFSET $1) t, generate_series(1, 100) s`, 10*i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `ANALYZE agent_events`); err != nil {
		t.Fatal(err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The backend's counts not yet reported include earlier statements'
	// rows: the read's are the difference.
	fetched := func() (n int64) {
		t.Helper()
		// The rows are in agent_events' partitions, which keep the counts.
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint FROM pg_stat_xact_user_tables
			WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'agent_events'::regclass)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := fetched()
	rows, held, err := agentsql.ProjectEventsAfter(ctx, tx, project, agentsql.ProjectCursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Another test's transaction may hold back more than ours does: fewer
	// rows, never more fetched.
	if n := fetched() - before; len(rows) > 100 || !held || n > 200 {
		t.Errorf("a read of 100 of the project's 20,000 events, 10,000 held, returned %d (held %v) and fetched %d rows, want at most 100, held, and at most 200 fetched", len(rows), held, n)
	}
}
