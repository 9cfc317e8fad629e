package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/worker"
)

// runThroughput measures tasks completed per second from a queue of N
// (instant model, one write_file per task), raw River no-op jobs per second,
// and raw River jobs that make the same database writes as one of our
// tasks: their ratio is the framework's own overhead.
func runThroughput(ctx context.Context, opts Options, r *Report) error {
	n := 10000
	if opts.Quick {
		n = 1000
	}
	r.Tasks = n
	ours, groups, err := oursThroughput(ctx, opts, n)
	if err != nil {
		return err
	}
	r.TasksPerS = ours
	for _, g := range groups {
		r.EventsPerTask += g
	}
	if r.RiverJobsPerS, err = riverThroughput(ctx, opts, n, nil); err != nil {
		return err
	}
	if r.RiverSameWritesPerS, err = riverThroughput(ctx, opts, n, groups); err != nil {
		return err
	}
	r.note("throughput: %d tasks; a task is 2 LLM calls (HTTP to a loopback scripted model), 1 file write, %d events in %d statements",
		n, r.EventsPerTask, len(groups))
	return nil
}

func oursThroughput(ctx context.Context, opts Options, n int) (float64, []int, error) {
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return 0, nil, err
	}
	defer db.drop()
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'throughput' FROM generate_series(1, $1)`, n); err != nil {
		return 0, nil, fmt.Errorf("queue %d tasks: %w", n, err)
	}
	p, err := startPipeline(ctx, opts, db, instantModel(), false)
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	if err := p.svc.Start(ctx); err != nil {
		return 0, nil, err
	}
	deadline := time.After(20 * time.Minute)
	for i := 0; i < n; i++ {
		select {
		case <-p.timed.done:
		case <-deadline:
			p.stop(ctx)
			return 0, nil, fmt.Errorf("only %d of %d tasks done after 20 minutes", i, n)
		case <-ctx.Done():
			p.stop(ctx)
			return 0, nil, ctx.Err()
		}
	}
	elapsed := time.Since(t0)
	p.stop(ctx)
	var ok int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM ai_tasks WHERE status = 'succeeded'").Scan(&ok); err != nil {
		return 0, nil, err
	}
	if ok != n {
		return 0, nil, fmt.Errorf("%d of %d tasks succeeded", ok, n)
	}
	groups, err := statementGroups(ctx, db)
	if err != nil {
		return 0, nil, err
	}
	return float64(n) / elapsed.Seconds(), groups, nil
}

// statementGroups returns how one task's events were written: the number
// of rows of each INSERT, in order (rows of one statement share created_at).
func statementGroups(ctx context.Context, db *database) ([]int, error) {
	rows, err := db.pool.Query(ctx, `SELECT count(*) FROM agent_events
		WHERE task_id = (SELECT id FROM ai_tasks LIMIT 1) GROUP BY created_at ORDER BY min(seq)`)
	if err != nil {
		return nil, fmt.Errorf("read statement groups: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

type sameWritesArgs struct {
	TaskID uuid.UUID `json:"task_id"`
}

func (sameWritesArgs) Kind() string { return "bench_same_writes" }

// riverThroughput works n raw River jobs: no-ops when groups is nil, else
// jobs replaying our writes: the claim transaction, each event statement,
// and the finishing transaction.
func riverThroughput(ctx context.Context, opts Options, n int, groups []int) (float64, error) {
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	var done atomic.Int64
	finished := make(chan struct{})
	count := func() {
		if done.Add(1) == int64(n) {
			close(finished)
		}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		count()
		return nil
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[sameWritesArgs]) error {
		if err := replayWrites(ctx, db, job.Args.TaskID, job.ID, groups); err != nil {
			return err
		}
		count()
		return nil
	}))
	client, err := newRiverClient(db, opts, workers)
	if err != nil {
		return 0, err
	}
	var params []river.InsertManyParams
	if groups == nil {
		for i := range n {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: worker.TaskQueue}})
		}
	} else {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
				SELECT gen_random_uuid(), 'build', 'same writes' FROM generate_series(1, $1) RETURNING id`, n)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			for _, id := range ids {
				params = append(params, river.InsertManyParams{Args: sameWritesArgs{TaskID: id}, InsertOpts: &river.InsertOpts{Queue: worker.TaskQueue}})
			}
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("queue same-writes tasks: %w", err)
		}
	}
	for start := 0; start < len(params); start += 1000 {
		if _, err := client.InsertMany(ctx, params[start:min(start+1000, len(params))]); err != nil {
			return 0, fmt.Errorf("insert river jobs: %w", err)
		}
	}
	t0 := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer stopRiver(ctx, client)
	select {
	case <-finished:
	case <-time.After(20 * time.Minute):
		return 0, fmt.Errorf("only %d of %d river jobs done after 20 minutes", done.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// replayWrites makes the database writes of one of our tasks, without the
// LLM calls, tools or storage: claim (row lock, status, run row, its
// events, one statement), each event statement, then finish (status, run, last events).
func replayWrites(ctx context.Context, db *database, taskID uuid.UUID, jobID int64, groups []int) error {
	payload := []byte(`{"kind":"stage_enter","stage":"bench","timestamp":"2026-01-01T00:00:00Z"}`)
	batch := func(k int) []agentsql.NewEvent {
		evs := make([]agentsql.NewEvent, k)
		for i := range evs {
			evs[i] = agentsql.NewEvent{Type: "progress", Payload: payload}
		}
		return evs
	}
	var projectID uuid.UUID
	fence := agentsql.Fence{TaskID: taskID}
	// As the worker writes: without notifying (its Announcer notifies after commit).
	insert := func(db agentsql.DBTX, evs []agentsql.NewEvent) ([]agentsql.EventRow, error) {
		return agentsql.InsertEventBatch(ctx, db, agentsql.EventBatch{TaskID: taskID, ProjectID: projectID, Events: evs, AfterCommit: true})
	}
	// The claim writes its own events (the first group), as the worker's does.
	c, err := agentsql.ClaimAndStart(ctx, db.pool, taskID, jobID, "bench", time.Minute, true)
	if err != nil || !c.Claimed {
		return fmt.Errorf("claim %s (claimed %t): %w", taskID, c.Claimed, err)
	}
	projectID, fence.Epoch = c.Task.ProjectID, c.Task.Fence
	for _, k := range groups[1 : len(groups)-1] {
		if _, err := insert(db.pool, batch(k)); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := agentsql.FinishTask(ctx, tx, fence, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: []byte(`{}`)}); err != nil {
			return err
		}
		_, err := insert(tx, batch(groups[len(groups)-1]))
		return err
	})
}
