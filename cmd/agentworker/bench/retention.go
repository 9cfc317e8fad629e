package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"syscall"
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
	// made one table again (not partitioned), an empty partitioned table
	// and the full one; UnpartitionedFull on the full table made one table
	// (the same rows in one table).
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

// Each measure is taken samplesPerRound times a round, in retentionRounds
// rounds after one that warms up.
const (
	samplesPerRound = 100
	retentionRounds = 3
)

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
		if err := agentsql.Migrate(ctx, pool); err != nil {
			return err
		}
		functions, err := agentsql.Functions()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(functions, func(f agentsql.FunctionFile) bool { return f.Name == "events.sql" })
		if i < 0 {
			return fmt.Errorf("no events.sql among the function files")
		}
		// agent_events as one table, as before partitioning: the same
		// columns, keys and indexes, and events.sql applied again for its
		// triggers and functions on it. The reads bound created_at by the
		// sealed days' floor; one table has no day to skip.
		_, err = pool.Exec(ctx, `ALTER TABLE agent_events RENAME TO agent_events_by_day;
			ALTER SEQUENCE agent_events_id_seq OWNED BY NONE;
			CREATE TABLE agent_events (LIKE agent_events_by_day INCLUDING ALL);
			ALTER SEQUENCE agent_events_id_seq OWNED BY agent_events.id;
			DROP TABLE agent_events_by_day CASCADE;
			DELETE FROM agent_event_days;`)
		if err == nil {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				// As Migrate applies it: the floor's body names the default
				// partition, gone with the partitions.
				if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, functions[i].SQL); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION agentworker_event_floor(p_xid xid8, p_id bigint) RETURNS timestamptz
					LANGUAGE sql STABLE AS $$ SELECT '-infinity'::timestamptz $$`)
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("make agent_events one table: %w", err)
		}
		return nil
	}
	type variant struct {
		into    *RetentionMeasures
		migrate func(context.Context, *pgxpool.Pool) error
		full    bool
		db      *database
		project uuid.UUID
		samples retentionSamples
	}
	vs := []*variant{{into: &rt.Unpartitioned, migrate: before}, {into: &rt.UnpartitionedFull, migrate: before, full: true},
		{into: &rt.Empty, migrate: agentsql.Migrate}, {into: &rt.Full, migrate: agentsql.Migrate, full: true}}
	defer func() {
		for _, v := range vs {
			if v.db != nil {
				v.db.drop()
			}
		}
	}()
	for _, v := range vs {
		db, err := newDatabaseWith(ctx, opts.AdminURL, size, nil, v.migrate)
		if err != nil {
			return err
		}
		v.db, v.project = db, uuid.New()
		if v.full {
			start := time.Now()
			if err := fillEvents(ctx, db.pool, v.project, rt.Events, rt.Days, opts.Logger); err != nil {
				return err
			}
			if v.into == &rt.Full {
				rt.GenerateS = time.Since(start).Seconds()
			}
		} else if _, err := db.pool.Exec(ctx, `ANALYZE ai_tasks; ANALYZE agent_events`); err != nil {
			// Analyzed as the full table is, before the measured rows.
			return err
		}
		// The fill's pages are written out before anything is measured.
		if _, err := db.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			// Only a superuser or pg_checkpoint may: measured without.
			opts.Logger.WarnContext(ctx, "bench retention: no checkpoint before the measures", slog.Any("error", err))
		}
	}
	// A server without fsync (the private cluster) leaves the fills'
	// gigabytes to the kernel's writeback, which would run under the
	// measures.
	syscall.Sync()
	// The tables are measured in turns, a round each, so that the machine's
	// drift falls on all four alike; the first round only warms the pools'
	// connections (catalog caches, partition descriptors).
	for round := range retentionRounds + 1 {
		for _, v := range vs {
			got, err := measureRetention(ctx, v.db.pool, v.project)
			if err != nil {
				return err
			}
			if round > 0 {
				v.samples.add(got)
			}
		}
	}
	for _, v := range vs {
		*v.into = v.samples.measures()
	}
	return dropOldestDay(ctx, vs[3].db.pool, rt)
}

// retentionSamples are the durations of each measure.
type retentionSamples struct {
	insert, batch, stream, list []time.Duration
}

func (s *retentionSamples) add(o retentionSamples) {
	s.insert = append(s.insert, o.insert...)
	s.batch = append(s.batch, o.batch...)
	s.stream = append(s.stream, o.stream...)
	s.list = append(s.list, o.list...)
}

func (s retentionSamples) measures() RetentionMeasures {
	return RetentionMeasures{InsertMS: percentiles(s.insert), BatchMS: percentiles(s.batch),
		StreamReadMS: percentiles(s.stream), TaskListMS: percentiles(s.list)}
}

// fillEvents writes n events over days past UTC days, one partition each,
// 33 a task, the tasks spread over 100 projects of which project is one;
// with SQL, not through the worker, a day a transaction. The seqs are
// given (agentworker.seq = 'statement') and nothing is announced.
func fillEvents(ctx context.Context, pool *pgxpool.Pool, project uuid.UUID, n, days int, log *slog.Logger) error {
	tasks := max(n/33, days)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	// One table has no partitions to make.
	var partitioned bool
	if err := pool.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = 'agent_events'::regclass`).Scan(&partitioned); err != nil {
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
	// Vacuumed as a table in its steady state is: otherwise autovacuum
	// works through the fill's 60 days while the measures run.
	for _, table := range []string{"ai_tasks", "agent_events"} {
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	if !partitioned {
		return nil
	}
	// The leader's passes, as they run once a day has been over an hour:
	// the past days are sealed, so that reads after their xids skip them. A day another
	// session holds (autovacuum) is left to the next pass, ten minutes
	// later on a server; here a second later, until all are sealed.
	for pass := 1; ; pass++ {
		if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
			return err
		}
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_event_days WHERE xid_below IS NULL AND day < ((now() - interval '1 hour') AT TIME ZONE 'UTC')::date`).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if pass == 30 {
			return fmt.Errorf("%d past days still unsealed after %d passes", open, pass)
		}
		log.InfoContext(ctx, "bench retention: days left unsealed by a pass", slog.Int("days", open))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// measureRetention takes the three measures on project: 50 new tasks (the
// task list's page), events appended one a statement (the insert), then the
// stream read from the first of them.
func measureRetention(ctx context.Context, pool *pgxpool.Pool, project uuid.UUID) (retentionSamples, error) {
	var m retentionSamples
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
	for i := range samplesPerRound {
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
	m.insert = took
	claims := make([]agentsql.Claim, len(tasks))
	for i, id := range tasks {
		if claims[i], err = agentsql.ClaimAndStart(ctx, pool, id, int64(i+1), "bench", time.Hour, true, 0); err != nil {
			return m, err
		}
		if !claims[i].Claimed {
			return m, fmt.Errorf("claim measured task %s: not claimable", id)
		}
	}
	took = nil
	batch := []agentsql.NewEvent{
		{Type: "progress", Payload: []byte(`{"kind":"tool_start","tool":"read_file"}`)},
		{Type: "progress", Payload: []byte(`{"kind":"tool_complete","tool":"read_file"}`)},
		{Type: "log", Payload: []byte(`{"level":"info","message":"measured"}`)}}
	for i := range samplesPerRound {
		c := claims[i%len(claims)]
		start := time.Now()
		_, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: c.Task.ID, ProjectID: project, Fence: &c.Task.Fence,
			Key: uuid.New(), Since: c.EventsSince, Events: batch, AfterCommit: true})
		took = append(took, time.Since(start))
		if err != nil {
			return m, err
		}
	}
	m.batch = took
	// The reads are measured with the statistics of the day holding the
	// new rows current, as autovacuum keeps them (it analyzes a partition
	// after 50 changed rows, then 10 %). Analyzed empty and not since, the
	// day's few estimated rows make the head of a project's stream and
	// list an append and sort of every event the project wrote that day,
	// not an index read of one: 5 ms against 2.3 at 9,450 events.
	var day string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM agent_events WHERE id = $1`, first).Scan(&day); err != nil {
		return m, fmt.Errorf("partition of event %d: %w", first, err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+pgx.Identifier{day}.Sanitize()); err != nil {
		return m, fmt.Errorf("analyze %s: %w", day, err)
	}
	cur, err := agentsql.EventCursor(ctx, pool, project, first)
	if err != nil {
		return m, err
	}
	took = nil
	// A project stream delivers below the cluster's xmin: another
	// database's transaction may hold the events back a while. Such a read
	// is not a sample.
	deadline := time.Now().Add(5 * time.Minute)
	for len(took) < samplesPerRound {
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
	m.stream = took
	took = nil
	for range samplesPerRound {
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
	m.list = took
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
