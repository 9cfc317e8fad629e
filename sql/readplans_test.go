package sql_test

import (
	"context"
	"testing"
	"time"

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

// TestTaskReadsPruneInEveryPlan: a task's reads (TaskEventsAfter,
// TasksEventsAfter with the task's floor carried in its cursor) are
// prepared statements, and scan no sealed day whether Postgres plans them
// for their arguments (the floor prunes while planning) or runs a generic
// plan (it prunes when the executor starts); a task whose events reach
// into the sealed days reads them.
func TestTaskReadsPruneInEveryPlan(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	old := insertTaskIn(t, pool, agentsql.StatusQueued)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	// Ten past days from two days back: a day is sealed an hour after it
	// ends, so yesterday is not before 01:00 UTC.
	for i := 2; i <= 11; i++ {
		if _, err := pool.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, today.AddDate(0, 0, -i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type, created_at)
		SELECT id, project_id, s, 'log', $2::timestamptz - s * interval '1 day' FROM ai_tasks, generate_series(2, 11) s WHERE id = $1`,
		old, today.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	fresh := insertTaskIn(t, pool, agentsql.StatusQueued)
	var project uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT project_id FROM ai_tasks WHERE id = $1`, fresh).Scan(&project); err != nil {
		t.Fatal(err)
	}
	written, err := agentsql.InsertEvents(ctx, pool, fresh, project, []agentsql.NewEvent{
		{Type: "log", Payload: []byte(`{"message": "1"}`)}, {Type: "log", Payload: []byte(`{"message": "2"}`)}})
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := pool.Config().ConnConfig.Copy()
			cfg.RuntimeParams["plan_cache_mode"] = mode
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
			floors, err := agentsql.TaskEventFloors(ctx, conn, []uuid.UUID{fresh, old})
			if err != nil {
				t.Fatal(err)
			}
			// scans runs read in a transaction and returns how many scans
			// of a sealed day it made.
			scans := func(read func(tx pgx.Tx) error) (n int64) {
				t.Helper()
				if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if err := read(tx); err != nil {
						return err
					}
					return tx.QueryRow(ctx, `SELECT coalesce(sum(s.seq_scan + coalesce(s.idx_scan, 0)), 0)::bigint
						FROM pg_stat_xact_user_tables s JOIN agent_event_days d ON d.partition = s.relname
						WHERE d.xid_below IS NOT NULL`).Scan(&n)
				}); err != nil {
					t.Fatal(err)
				}
				return n
			}
			const runs = 8 // more than Postgres plans for the arguments before it weighs a generic plan
			n := scans(func(tx pgx.Tx) error {
				for range runs {
					many, err := agentsql.TasksEventsAfter(ctx, tx, []agentsql.TaskCursor{{Task: fresh, Floor: floors[0]}}, 100)
					if err != nil {
						return err
					}
					one, err := agentsql.TaskEventsAfter(ctx, tx, fresh, 1, 100)
					if err != nil {
						return err
					}
					if len(many) != 2 || many[0].ID != written[0].ID || many[1].ID != written[1].ID || len(one) != 1 || one[0].ID != written[1].ID {
						t.Errorf("the new task's reads got %d and %d events, want its 2 and the one after seq 1", len(many), len(one))
					}
				}
				return nil
			})
			if n != 0 {
				t.Errorf("%d reads of a task inserted after the seal scanned sealed days %d times; want none", 2*runs, n)
			}
			n = scans(func(tx pgx.Tx) error {
				rows, err := agentsql.TasksEventsAfter(ctx, tx, []agentsql.TaskCursor{{Task: old, Floor: floors[1]}}, 100)
				if len(rows) != 10 {
					t.Errorf("the old task's read got %d events, want its 10 in sealed days", len(rows))
				}
				return err
			})
			if n < 10 {
				t.Errorf("the old task's read scanned sealed days %d times, want each of the 10", n)
			}
			// Read together, the tasks read from the older floor.
			both, err := agentsql.TasksEventsAfter(ctx, conn, []agentsql.TaskCursor{{Task: fresh, Floor: floors[0]}, {Task: old, Floor: floors[1]}}, 100)
			if err != nil || len(both) != 12 || both[0].ID != written[0].ID || *both[2].TaskID != old {
				t.Errorf("the new and the old task read together: %d events (%v), want the new task's 2 then the old task's 10", len(both), err)
			}

			rows, err := conn.Query(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
				WHERE statement LIKE '%FROM agent_events%created_at >= $4%' AND statement NOT LIKE '%pg_prepared_statements%'`)
			if err != nil {
				t.Fatal(err)
			}
			plans, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]int64, error) {
				var p [2]int64
				return p, row.Scan(&p[0], &p[1])
			})
			if err != nil {
				t.Fatal(err)
			}
			kind := map[string]int{"force_custom_plan": 1, "force_generic_plan": 0}[mode]
			if len(plans) != 2 || plans[0][kind] < runs || plans[1][kind] < runs {
				t.Errorf("prepared reads (generic, custom plans): %v; want the two reads, each run %d times with a %s", plans, runs, mode)
			}
		})
	}
}
