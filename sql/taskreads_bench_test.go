package sql_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// BenchmarkTasksEventsAfter is a follower's read of the events of the few
// tasks one announcement names (5 of 100, 20 events each), on one
// connection: with each task's floor carried in its cursor, as the SSE hub
// reads, and looked up on every read.
func BenchmarkTasksEventsAfter(b *testing.B) {
	ctx := b.Context()
	pool := onePooled(b)
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) SELECT gen_random_uuid(), 'chat', 'x' FROM generate_series(1, 100)`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type)
		SELECT t.id, t.project_id, s, 'log' FROM ai_tasks t, generate_series(1, 20) s`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE ai_tasks; ANALYZE agent_events`); err != nil {
		b.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM ai_tasks ORDER BY id LIMIT 5`)
	if err != nil {
		b.Fatal(err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	floors, err := agentsql.TaskEventFloors(ctx, pool, ids)
	if err != nil {
		b.Fatal(err)
	}
	for _, carried := range []bool{true, false} {
		b.Run(map[bool]string{true: "FloorCarried", false: "FloorLookedUp"}[carried], func(b *testing.B) {
			cursors := make([]agentsql.TaskCursor, len(ids))
			for i, id := range ids {
				cursors[i] = agentsql.TaskCursor{Task: id, AfterSeq: 15}
				if carried {
					cursors[i].Floor = floors[i]
				}
			}
			for b.Loop() {
				got, err := agentsql.TasksEventsAfter(ctx, pool, cursors, 1000)
				if err != nil || len(got) != 5*len(ids) {
					b.Fatalf("read %d events (%v), want %d", len(got), err, 5*len(ids))
				}
			}
		})
	}
}

// BenchmarkProjectEventsAfter: a project stream's read after an
// announcement, its floor carried (as the SSE stream keeps it) or looked up.
func BenchmarkProjectEventsAfter(b *testing.B) {
	ctx := b.Context()
	pool := onePooled(b)
	project := uuid.New()
	var err error
	if _, err = pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) SELECT $1, 'chat', 'x' FROM generate_series(1, 20)`, project); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type)
		SELECT t.id, t.project_id, s, 'log' FROM ai_tasks t, generate_series(1, 20) s WHERE t.project_id = $1`, project); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE ai_tasks; ANALYZE agent_events`); err != nil {
		b.Fatal(err)
	}
	// Deliverable once below every running transaction's xid (another
	// test's may be open a while).
	var all []agentsql.ProjectEventRow
	poll.Until(b, "the project's 400 events deliverable", 30*time.Second, func() bool {
		all, _, err = agentsql.ProjectEventsAfter(ctx, pool, project, agentsql.ProjectCursor{}, 1000)
		return err == nil && len(all) == 400
	})
	cur := all[len(all)-6].Cursor
	floor, err := agentsql.ProjectEventFloor(ctx, pool, cur)
	if err != nil {
		b.Fatal(err)
	}
	for _, carried := range []bool{true, false} {
		b.Run(map[bool]string{true: "FloorCarried", false: "FloorLookedUp"}[carried], func(b *testing.B) {
			f := floor
			if !carried {
				f = agentsql.EventFloor{}
			}
			for b.Loop() {
				got, _, err := agentsql.ProjectEventsAfterFloor(ctx, pool, project, cur, f, 100)
				if err != nil || len(got) != 5 {
					b.Fatalf("read %d events (%v), want 5", len(got), err)
				}
			}
		})
	}
}

// onePooled is a new database's pool of one connection: a read's cost
// without the pool's spread.
func onePooled(b *testing.B) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	agentsql.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}
