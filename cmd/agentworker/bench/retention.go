package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
)

// Retention is the retention scenario: agent_events with a year's worth of
// days in it against an empty one, and the drop of a day.
type Retention struct {
	// Events and Days are the full table's size: Events rows over Days UTC
	// days, one partition each, 33 events a task.
	Events int `json:"events"`
	Days   int `json:"days"`
	// GenerateS is how long generating the full table took (not a target).
	GenerateS float64 `json:"generate_s"`
	// Unpartitioned, Empty and Full are the measures on an empty table
	// before migration 010 (not partitioned), an empty partitioned table
	// and the full one; UnpartitionedFull on the full table before
	// migration 010 (the same rows in one table).
	Unpartitioned     RetentionMeasures `json:"unpartitioned"`
	UnpartitionedFull RetentionMeasures `json:"unpartitioned_full"`
	Empty             RetentionMeasures `json:"empty"`
	Full              RetentionMeasures `json:"full"`
	// DropDayMS is how long detaching and dropping the oldest day took, in
	// one transaction (agentworker_drop_event_partition).
	DropDayMS float64 `json:"drop_day_ms"`
	// DayEvents is how many events that day held.
	DayEvents int `json:"day_events"`
}

// RetentionMeasures are the reads and writes a busy table must not slow.
type RetentionMeasures struct {
	// InsertMS: one event appended to a task by a writer that does not
	// hold it (agentsql.InsertEvents: the seq trigger, the announce).
	InsertMS Percentiles `json:"insert_ms"`
	// BatchMS: a holder's keyed batch of 3 events, as the worker writes
	// them (the fence, the key's check from the claim's floor, the seqs;
	// agentsql.InsertEventBatch).
	BatchMS Percentiles `json:"batch_ms"`
	// StreamReadMS: a project stream's resume, 100 events after a cursor
	// (agentsql.ProjectEventsAfter).
	StreamReadMS Percentiles `json:"stream_read_ms"`
	// TaskListMS: the console's task list, the newest 50 tasks of a
	// project (agentsql.ListProjectTasks).
	TaskListMS Percentiles `json:"task_list_ms"`
}

// retentionSamples is how many times each measure is taken.
const retentionSamples = 300

func runRetention(ctx context.Context, opts Options, r *Report) error {
	rt := &r.Retention
	rt.Days, rt.Events = 60, opts.RetentionEvents
	if rt.Events <= 0 {
		rt.Events = 10_000_000
		if opts.Quick {
			rt.Events = 100_000
		}
	}
	size := func(c *pgxpool.Config) { c.MaxConns = 4 }
	before := func(ctx context.Context, pool *pgxpool.Pool) error {
		ms, err := agentsql.Migrations()
		if err != nil {
			return err
		}
		var keep []agentsql.Migration
		for _, m := range ms {
			if m.Name < "010" {
				keep = append(keep, m)
			}
		}
		if _, err = agentsql.MigrateList(ctx, pool, nil, keep); err != nil {
			return err
		}
		// The reads bound created_at by migration 010's floor, a claim
		// reads the task's from migration 012's column; an unpartitioned
		// table has no day to skip.
		_, err = pool.Exec(ctx, `CREATE FUNCTION agentworker_event_floor(xid8, bigint) RETURNS timestamptz
			LANGUAGE sql STABLE AS $$ SELECT '-infinity'::timestamptz $$;
			ALTER TABLE ai_tasks ADD COLUMN events_id_floor bigint`)
		return err
	}
	for _, v := range []struct {
		into    *RetentionMeasures
		migrate func(context.Context, *pgxpool.Pool) error
		full    bool
	}{{&rt.Unpartitioned, before, false}, {&rt.UnpartitionedFull, before, true}, {&rt.Empty, agentsql.Migrate, false}, {&rt.Full, agentsql.Migrate, true}} {
		db, err := newDatabaseWith(ctx, opts.AdminURL, size, nil, v.migrate)
		if err != nil {
			return err
		}
		err = func() error {
			defer db.drop()
			project := uuid.New()
			if v.full {
				start := time.Now()
				if err := fillEvents(ctx, db.pool, project, rt.Events, rt.Days, opts.Logger); err != nil {
					return err
				}
				if v.into == &rt.Full {
					rt.GenerateS = time.Since(start).Seconds()
				}
			} else if _, err := db.pool.Exec(ctx, `ANALYZE ai_tasks; ANALYZE agent_events`); err != nil {
				// Analyzed as the full table is, before the measured rows: the
				// same statistics of today's partition, the same plans.
				return err
			}
			m, err := measureRetention(ctx, db.pool, project)
			*v.into = m
			if err != nil || v.into != &rt.Full {
				return err
			}
			return dropOldestDay(ctx, db.pool, rt)
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// fillEvents writes n events over days past UTC days, one partition each,
// 33 a task, the tasks spread over 100 projects of which project is one;
// with SQL, not through the worker, a day a transaction. The seqs are
// given (agentworker.seq = 'statement') and nothing is announced.
func fillEvents(ctx context.Context, pool *pgxpool.Pool, project uuid.UUID, n, days int, log *slog.Logger) error {
	tasks := max(n/33, days)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	// Before migration 010 the table has no partitions to make.
	var partitioned bool
	if err := pool.QueryRow(ctx, `SELECT to_regprocedure('agentworker_create_event_partition(date)') IS NOT NULL`).Scan(&partitioned); err != nil {
		return err
	}
	for d := days; d >= 1; d-- {
		day := today.AddDate(0, 0, -d)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if partitioned {
				if _, err := tx.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, day); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('agentworker.skip_enqueue', 'on', true), set_config('synchronous_commit', 'off', true)`); err != nil {
				return err
			}
			perDay := tasks / days
			if _, err := tx.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, created_at, updated_at)
				SELECT CASE WHEN g % 100 = 0 THEN $1 ELSE ('00000000-0000-4000-8000-' || lpad((g % 100)::text, 12, '0'))::uuid END,
				       'build', 'bench', $2::timestamptz + g * (interval '1 day' / $3), $2::timestamptz + g * (interval '1 day' / $3)
				FROM generate_series(0, $3 - 1) g`, project, day, perDay); err != nil {
				return fmt.Errorf("tasks of %s: %w", day.Format(time.DateOnly), err)
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('agentworker.seq', 'statement', true), set_config('agentworker.announce', 'after_commit', true)`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type, payload, created_at)
				SELECT t.id, t.project_id, s, CASE WHEN s % 10 = 0 THEN 'log' ELSE 'progress' END,
				       jsonb_build_object('kind', 'tool_complete', 'tool', 'read_file', 'message', 'read 120 lines of src/app.ts'),
				       t.created_at + s * interval '1 second'
				FROM ai_tasks t, generate_series(1, 33) s
				WHERE t.created_at >= $1 AND t.created_at < $1::timestamptz + interval '1 day'`, day); err != nil {
				return fmt.Errorf("events of %s: %w", day.Format(time.DateOnly), err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fill %s: %w", day.Format(time.DateOnly), err)
		}
		log.InfoContext(ctx, "bench retention: filled a day", slog.String("day", day.Format(time.DateOnly)))
	}
	if partitioned {
		// The leader's pass, as it runs once a day has ended: the past days
		// are sealed, so that reads after their xids skip them.
		if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
			return err
		}
	}
	_, err := pool.Exec(ctx, `ANALYZE ai_tasks; ANALYZE agent_events`)
	return err
}

// measureRetention takes the three measures on project: 50 new tasks (the
// task list's page), events appended one a statement (the insert), then the
// stream read from the first of them.
func measureRetention(ctx context.Context, pool *pgxpool.Pool, project uuid.UUID) (RetentionMeasures, error) {
	var m RetentionMeasures
	var tasks []uuid.UUID
	for range 50 {
		var id uuid.UUID
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('agentworker.skip_enqueue', 'on', true)`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'measured') RETURNING id`, project).Scan(&id)
		})
		if err != nil {
			return m, fmt.Errorf("insert measured task: %w", err)
		}
		tasks = append(tasks, id)
	}
	var first int64
	var took []time.Duration
	var err error
	for i := range retentionSamples {
		start := time.Now()
		rows, err := agentsql.InsertEvents(ctx, pool, tasks[i%len(tasks)], project,
			[]agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"measured"}`)}})
		took = append(took, time.Since(start))
		if err != nil {
			return m, err
		}
		if i == 0 {
			first = rows[0].ID
		}
	}
	m.InsertMS = percentiles(took)
	claims := make([]agentsql.Claim, len(tasks))
	for i, id := range tasks {
		if claims[i], err = agentsql.ClaimAndStart(ctx, pool, id, int64(i+1), "bench", time.Hour, true); err != nil {
			return m, err
		}
		if !claims[i].Claimed {
			return m, fmt.Errorf("claim measured task %s: not claimable", id)
		}
	}
	took = took[:0]
	batch := []agentsql.NewEvent{
		{Type: "progress", Payload: []byte(`{"kind":"tool_start","tool":"read_file"}`)},
		{Type: "progress", Payload: []byte(`{"kind":"tool_complete","tool":"read_file"}`)},
		{Type: "log", Payload: []byte(`{"level":"info","message":"measured"}`)}}
	for i := range retentionSamples {
		c := claims[i%len(claims)]
		start := time.Now()
		_, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: c.Task.ID, ProjectID: project, Fence: &c.Task.Fence,
			Key: uuid.New(), Since: c.EventsSince, Events: batch, AfterCommit: true})
		took = append(took, time.Since(start))
		if err != nil {
			return m, err
		}
	}
	m.BatchMS = percentiles(took)
	cur, err := agentsql.EventCursor(ctx, pool, project, first)
	if err != nil {
		return m, err
	}
	took = took[:0]
	// A project stream delivers below the cluster's xmin: another
	// database's transaction may hold the events back a while. Such a read
	// is not a sample.
	deadline := time.Now().Add(5 * time.Minute)
	for len(took) < retentionSamples {
		start := time.Now()
		rows, _, err := agentsql.ProjectEventsAfter(ctx, pool, project, cur, 100)
		d := time.Since(start)
		if err != nil {
			return m, err
		}
		if len(rows) == 100 {
			took = append(took, d)
			continue
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("stream read gave %d events, want 100: the cluster's xmin stayed behind for 5 minutes", len(rows))
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	m.StreamReadMS = percentiles(took)
	took = took[:0]
	for range retentionSamples {
		start := time.Now()
		page, err := agentsql.ListProjectTasks(ctx, pool, project, agentsql.TaskQuery{Limit: 50})
		took = append(took, time.Since(start))
		if err != nil {
			return m, err
		}
		if len(page.Tasks) != 50 {
			return m, fmt.Errorf("task list gave %d tasks, want 50", len(page.Tasks))
		}
	}
	m.TaskListMS = percentiles(took)
	return m, nil
}

// dropOldestDay finishes the oldest day's tasks, then times its drop.
func dropOldestDay(ctx context.Context, pool *pgxpool.Pool, rt *Retention) error {
	parts, err := agentsql.EventPartitions(ctx, pool)
	if err != nil || len(parts) == 0 {
		return fmt.Errorf("oldest partition: %v, %w", parts, err)
	}
	oldest := parts[0]
	if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET status = 'cancelled'
		WHERE created_at >= $1 AND created_at < $1::timestamptz + interval '1 day' AND status = 'queued'`, oldest.Day); err != nil {
		return fmt.Errorf("finish the tasks of %s: %w", oldest.Name, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{oldest.Name}.Sanitize()).Scan(&rt.DayEvents); err != nil {
		return err
	}
	finished, unfinished, err := agentsql.PartitionTasks(ctx, pool, oldest.Name)
	if err != nil {
		return err
	}
	if len(unfinished) > 0 {
		return fmt.Errorf("%s still has %d unfinished tasks", oldest.Name, len(unfinished))
	}
	start := time.Now()
	dropped, err := agentsql.DropEventPartition(ctx, pool, oldest.Name, finished, 5*time.Second)
	rt.DropDayMS = float64(time.Since(start).Microseconds()) / 1000
	if err != nil || !dropped {
		return fmt.Errorf("drop %s: dropped %v, %w", oldest.Name, dropped, err)
	}
	return nil
}

// markdown rows of the retention scenario.
func (rt Retention) rows(row func(name, ours, river, target string)) {
	if rt.Events == 0 {
		return
	}
	pc := func(p Percentiles) string { return fmt.Sprintf("p50 %.2f / p95 %.2f", p.P50, p.P95) }
	within := func(name string, get func(RetentionMeasures) Percentiles) {
		row(fmt.Sprintf("%s, %s events over %d days / empty; before partitioning: full / empty (ms)", name, thousands(rt.Events), rt.Days),
			pc(get(rt.Full))+" / "+pc(get(rt.Empty))+"; "+pc(get(rt.UnpartitionedFull))+" / "+pc(get(rt.Unpartitioned)), "",
			fmt.Sprintf("p50 ≤ 1.2× empty (now %.2f×; before partitioning %.2f×)", ratio(get(rt.Full).P50, get(rt.Empty).P50),
				ratio(get(rt.UnpartitionedFull).P50, get(rt.Unpartitioned).P50)))
	}
	within("insert of an event", func(m RetentionMeasures) Percentiles { return m.InsertMS })
	within("worker's keyed batch, 3 events", func(m RetentionMeasures) Percentiles { return m.BatchMS })
	within("project stream read, 100 events", func(m RetentionMeasures) Percentiles { return m.StreamReadMS })
	within("console task list, 50 tasks", func(m RetentionMeasures) Percentiles { return m.TaskListMS })
	row(fmt.Sprintf("drop a day (%s events): detach + drop (ms)", thousands(rt.DayEvents)), fmt.Sprintf("%.1f", rt.DropDayMS), "", "< 1,000")
}

// thousands writes n with thousands separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
