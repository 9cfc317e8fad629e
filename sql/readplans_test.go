package sql_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestEventReadsFollowTheTableAsItGrows: a follower's read of the events
// after its cursor goes through agent_events' indexes however small the
// table was when the connection first ran it. Postgres keeps a prepared
// statement's generic plan after five runs; one made on a table of a few
// rows scans the whole table (and sorts it) on every read, and keeps doing
// so as the table grows, until autovacuum next analyzes it: a fresh
// deployment's first minutes.
func TestEventReadsFollowTheTableAsItGrows(t *testing.T) {
	t.Parallel()
	reads := []struct {
		name string
		read func(ctx context.Context, tx pgx.Tx, task, project uuid.UUID) error
	}{
		{"TaskEventsAfter", func(ctx context.Context, tx pgx.Tx, task, _ uuid.UUID) error {
			_, err := agentsql.TaskEventsAfter(ctx, tx, task, 0, 100)
			return err
		}},
		{"TasksEventsAfter", func(ctx context.Context, tx pgx.Tx, task, _ uuid.UUID) error {
			_, err := agentsql.TasksEventsAfter(ctx, tx, []agentsql.TaskCursor{{Task: task}}, 100)
			return err
		}},
		{"ProjectEventsAfter", func(ctx context.Context, tx pgx.Tx, _, project uuid.UUID) error {
			_, _, err := agentsql.ProjectEventsAfter(ctx, tx, project, agentsql.ProjectCursor{}, 100)
			return err
		}},
	}
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			conn, err := pgx.Connect(ctx, dbtest.NewURL(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
			if _, err := conn.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
				SELECT gen_random_uuid(), 'build', 'read' FROM generate_series(1, 1000)`); err != nil {
				t.Fatal(err)
			}
			events := func(tasks int, seqs string) {
				t.Helper()
				if _, err := conn.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type)
					SELECT t.id, t.project_id, s, 'log' FROM (SELECT * FROM ai_tasks ORDER BY id LIMIT $1) t, `+seqs+` s`, tasks); err != nil {
					t.Fatal(err)
				}
			}
			var task, project uuid.UUID
			if err := conn.QueryRow(ctx, `SELECT id, project_id FROM ai_tasks ORDER BY id LIMIT 1`).Scan(&task, &project); err != nil {
				t.Fatal(err)
			}
			// seqScans runs the read in a transaction and counts the scans
			// of the whole table it made.
			seqScans := func() int64 {
				t.Helper()
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				// The backend's counts not yet reported include earlier
				// transactions' scans: the read's are the difference.
				scans := func() (n int64) {
					t.Helper()
					if err := tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'agent_events'::regclass`).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				before := scans()
				if err := r.read(ctx, tx, task, project); err != nil {
					t.Fatal(err)
				}
				return scans() - before
			}

			events(5, "generate_series(1, 2)")
			if _, err := conn.Exec(ctx, `ANALYZE agent_events`); err != nil {
				t.Fatal(err)
			}
			// More than five runs: Postgres then settles on a generic plan,
			// if let.
			for range 6 {
				seqScans()
			}
			events(1000, "generate_series(3, 60)")
			if n := seqScans(); n != 0 {
				t.Errorf("%s scanned the whole agent_events table %d times (of %d rows) for one read", r.name, n, 5*2+1000*58)
			}
		})
	}
}
