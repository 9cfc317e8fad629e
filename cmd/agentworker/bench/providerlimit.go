package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/worker"
)

// ProviderLimit is builds against a provider that refuses requests past
// a requests-per-second limit (429 with Retry-After), worked by 1 and 4
// `agentworker serve` processes sharing the limit.
type ProviderLimit struct {
	Tasks        int                `json:"tasks"`
	CallsPerTask int                `json:"calls_per_task"`
	RPS          float64            `json:"rps"`
	Runs         []ProviderLimitRun `json:"runs"`
}

// ProviderLimitRun is one run: Failed tasks (goal 0), refused calls per
// answered one (goal ≤ 0.1), and the wall time against the limit's ideal,
// calls ÷ RPS (goal ≤ 1.3).
type ProviderLimitRun struct {
	Replicas     int     `json:"replicas"`
	Headers      bool    `json:"headers"` // x-ratelimit-* on every answer
	Failed       int     `json:"failed"`
	Answered     int     `json:"answered"`
	Refused      int     `json:"refused"`
	RefusedRatio float64 `json:"refused_per_answered"`
	WallS        float64 `json:"wall_s"`
	IdealS       float64 `json:"ideal_s"`
	WallRatio    float64 `json:"wall_ratio"`
	// Errors are the failed tasks' errors (a few).
	Errors []string `json:"errors,omitempty"`
}

func runProviderLimit(ctx context.Context, opts Options, r *Report) error {
	if opts.Binary == "" {
		r.note("provider-limit: skipped (no agentworker binary given)")
		return nil
	}
	p := &r.ProviderLimit
	p.Tasks, p.CallsPerTask, p.RPS = 300, 2, 20
	counts := []int{1, 4}
	if opts.Quick {
		p.Tasks, counts = 40, []int{1, 2}
	}
	root, _ := filesRoot()
	for _, headers := range []bool{false, true} {
		for _, k := range counts {
			run, err := providerLimitRun(ctx, opts, root, k, &scripted.RateLimit{RPS: p.RPS, Headers: headers}, p.Tasks)
			if err != nil {
				return fmt.Errorf("%d replicas (headers %t): %w", k, headers, err)
			}
			run.IdealS = ratio(float64(p.Tasks*p.CallsPerTask), p.RPS)
			run.WallRatio = ratio(run.WallS, run.IdealS)
			p.Runs = append(p.Runs, run)
		}
	}
	r.note("provider-limit: %d build tasks of %d model calls inserted in one statement against a scripted provider answering %.0f requests/s (a bucket of one second's worth, 429 with Retry-After past it; x-ratelimit-* headers on every answer in the runs marked headers), worked by 1 and 4 `agentworker serve` processes at the default WORKER_CONCURRENCY on one database; ideal = calls ÷ limit; wall from the insert to the last finish, by the database's clock",
		p.Tasks, p.CallsPerTask, p.RPS)
	return nil
}

// providerLimitRun works tasks two-call builds with k serve processes
// against a provider refusing as limit says (nil: never), after a warm-up
// task per process, and counts what the provider answered and refused.
func providerLimitRun(ctx context.Context, opts Options, root string, k int, limit *scripted.RateLimit, tasks int) (ProviderLimitRun, error) {
	run := ProviderLimitRun{Replicas: k, Headers: limit != nil && limit.Headers}
	if limit == nil {
		limit = &scripted.RateLimit{}
	}
	model, err := scripted.ListenLoopbackLimited(instantModel(), limit)
	if err != nil {
		return run, err
	}
	defer func() { _ = model.Close() }()
	db, err := newDatabase(ctx, opts.AdminURL, 5)
	if err != nil {
		return run, err
	}
	defer db.drop()
	dir, err := os.MkdirTemp(root, "agentworker-bench-provider-limit-")
	if err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	for range k {
		_, stop, err := startServe(ctx, opts, db, dir, model.URL, worker.DefaultConcurrency)
		if err != nil {
			return run, err
		}
		defer stop()
	}
	// Warm-up: one task per replica, so every process is up and has met
	// the provider; then a second for the bucket to fill again.
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'warm-up' FROM generate_series(1, $1)`, k); err != nil {
		return run, err
	}
	if err := waitDone(ctx, db, k, time.Minute); err != nil {
		return run, err
	}
	time.Sleep(time.Second) // the provider's bucket refills: not a wait for a condition
	answered0, refused0 := limit.Counts()

	var inserted time.Time
	if err := db.pool.QueryRow(ctx, `WITH t AS (INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'provider-limit' FROM generate_series(1, $1) RETURNING created_at)
		SELECT min(created_at) FROM t`, tasks).Scan(&inserted); err != nil {
		return run, fmt.Errorf("queue %d tasks: %w", tasks, err)
	}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var busy bool
		if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ai_tasks WHERE status IN ('queued', 'running'))`).Scan(&busy); err != nil {
			return run, err
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			return run, errRoundUnfinished
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	var finished time.Time
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'succeeded' AND prompt = 'provider-limit'), max(finished_at)
		FROM ai_tasks`).Scan(&run.Failed, &finished); err != nil {
		return run, err
	}
	rows, err := db.pool.Query(ctx, `SELECT status || ': ' || coalesce(error::text, '') FROM ai_tasks
		WHERE status <> 'succeeded' AND prompt = 'provider-limit' LIMIT 3`)
	if err != nil {
		return run, err
	}
	if run.Errors, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return run, err
	}
	answered, refused := limit.Counts()
	run.Answered, run.Refused = answered-answered0, refused-refused0
	run.RefusedRatio = ratio(float64(run.Refused), float64(run.Answered))
	run.WallS = ratio(finished.Sub(inserted).Seconds(), 1)
	return run, nil
}
