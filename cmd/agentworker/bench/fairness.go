package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Fairness is one project's long backlog and another project's single
// tasks inserted behind it, at a small WORKER_CONCURRENCY: how long the
// other project's task waits to start, and what the backlog's project
// loses in throughput for it. Measured without a per-project cap and with
// WORKER_PROJECT_MAX_RUNNING at half the concurrency.
type Fairness struct {
	Backlog      int           `json:"backlog"`
	Concurrency  int           `json:"concurrency"`
	ModelDelayMS float64       `json:"model_delay_ms"`
	WindowS      float64       `json:"window_s"`
	Runs         []FairnessRun `json:"runs"`
}

// FairnessRun is one cap's figures. Goals: the other project's task
// starts within 5 s (p99), the backlog's throughput beside it at most 10 %
// below its throughput alone.
type FairnessRun struct {
	Cap int `json:"cap"` // WORKER_PROJECT_MAX_RUNNING (0: none)
	// AlonePerS and BesidePerS are the backlog's tasks finished a second
	// over the window, alone and with the other project's tasks.
	AlonePerS  float64 `json:"alone_per_s"`
	BesidePerS float64 `json:"beside_per_s"`
	// StartS is the other project's tasks' insert → start; Unstarted
	// counts those not started within a minute (not in StartS).
	StartS    Percentiles `json:"start_s"`
	Probes    int         `json:"probes"`
	Unstarted int         `json:"unstarted"`
}

func runFairness(ctx context.Context, opts Options, r *Report) error {
	f := &r.Fairness
	f.Backlog, f.Concurrency = 1000, 10
	delay, ramp, window, every := 5*time.Second, 10*time.Second, 60*time.Second, 5*time.Second
	if opts.Quick {
		f.Backlog, delay, ramp, window, every = 300, 100*time.Millisecond, time.Second, 4*time.Second, 400*time.Millisecond
	}
	f.ModelDelayMS, f.WindowS = float64(delay.Milliseconds()), window.Seconds()
	for _, cap := range []int{0, f.Concurrency / 2} {
		run := FairnessRun{Cap: cap}
		alone, _, _, err := fairnessRun(ctx, opts, f, cap, delay, ramp, window, 0)
		if err != nil {
			return fmt.Errorf("cap %d, backlog alone: %w", cap, err)
		}
		beside, starts, unstarted, err := fairnessRun(ctx, opts, f, cap, delay, ramp, window, every)
		if err != nil {
			return fmt.Errorf("cap %d, with another project: %w", cap, err)
		}
		run.AlonePerS, run.BesidePerS = alone, beside
		run.StartS = percentiles(starts)
		run.StartS.P50, run.StartS.P95, run.StartS.P99 = run.StartS.P50/1000, run.StartS.P95/1000, run.StartS.P99/1000
		run.Probes, run.Unstarted = len(starts)+unstarted, unstarted
		f.Runs = append(f.Runs, run)
	}
	r.note("fairness: %d build tasks of one project inserted in one statement, WORKER_CONCURRENCY=%d, model delay %s per call (2 calls); after %s, for %s: the backlog's tasks finished a second, and, in the runs beside another project, one task of a second project at a time, inserted once its last finished and at most every %s, each waited for up to a minute; without a cap and with WORKER_PROJECT_MAX_RUNNING=%d",
		f.Backlog, f.Concurrency, delay, ramp, window, every, f.Concurrency/2)
	return nil
}

// fairnessRun queues the backlog, waits ramp, and for window counts the
// backlog's finished tasks; with every > 0 it inserts another project's
// tasks one at a time, at most every that often, and measures each one's
// insert → start.
func fairnessRun(ctx context.Context, opts Options, f *Fairness, cap int, delay, ramp, window, every time.Duration) (float64, []time.Duration, int, error) {
	db, err := newWorkerDatabase(ctx, opts.AdminURL, f.Concurrency, nil)
	if err != nil {
		return 0, nil, 0, err
	}
	defer db.drop()
	o := opts
	o.Concurrency, o.projectMaxRunning = f.Concurrency, cap
	p, err := startWarm(ctx, o, db, fixedDelayModel(delay))
	if err != nil {
		return 0, nil, 0, err
	}
	defer p.stop(ctx)
	a, b := uuid.New(), uuid.New()
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'build', 'backlog' FROM generate_series(1, $2)`, a, f.Backlog); err != nil {
		return 0, nil, 0, fmt.Errorf("queue %d tasks: %w", f.Backlog, err)
	}
	start := time.Now().Add(ramp)
	end := start.Add(window)
	time.Sleep(ramp) // the backlog reaches its steady pace: not a wait for a condition
	// The other project has one task at a time: the next is inserted once
	// the last has finished, at most every `every`. Each is waited for up
	// to maxWait after its insert.
	const maxWait = time.Minute
	var starts []time.Duration
	unstarted := 0
	for every > 0 && time.Now().Before(end) {
		var id uuid.UUID
		at := time.Now()
		if err := db.pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'other') RETURNING id`,
			b).Scan(&id); err != nil {
			return 0, nil, 0, fmt.Errorf("insert the other project's task: %w", err)
		}
		for {
			if s := p.timed.startedAt(id); !s.IsZero() {
				starts = append(starts, s.Sub(at))
				break
			}
			if time.Since(at) > maxWait {
				unstarted++
				break
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
		for time.Since(at) < maxWait && p.timed.finishedAt(id).IsZero() {
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
		if next := at.Add(every); time.Now().Before(next) {
			time.Sleep(time.Until(next)) // the next probe's time: not a wait for a condition
		}
	}
	if d := time.Until(end); d > 0 {
		time.Sleep(d) // the window's end: not a wait for a condition
	}
	rows, err := db.pool.Query(ctx, `SELECT id FROM ai_tasks WHERE project_id = $1`, a)
	if err != nil {
		return 0, nil, 0, err
	}
	ids := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, nil, 0, err
		}
		ids[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, 0, err
	}
	done := 0
	p.timed.mu.Lock()
	for id, at := range p.timed.finished {
		if ids[id] && !at.Before(start) && at.Before(end) {
			done++
		}
	}
	p.timed.mu.Unlock()
	// The backlog left is not worked: the database is dropped.
	if _, err := db.pool.Exec(ctx, `UPDATE ai_tasks SET status = 'cancelled' WHERE status = 'queued'`); err != nil {
		return 0, nil, 0, fmt.Errorf("cancel the backlog left: %w", err)
	}
	return float64(done) / window.Seconds(), starts, unstarted, nil
}
