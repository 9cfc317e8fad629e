package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/agentworker/agentworker/worker"
)

// runLatency measures insert → handler start for tasks inserted with plain
// SQL, and insert → Work start for raw River no-op jobs inserted with
// client.Insert on a client with the same queue and fetch settings. Each
// sample waits for the previous one to finish, so neither competes with
// itself.
func runLatency(ctx context.Context, opts Options, r *Report) error {
	n := 300
	if opts.Quick {
		n = 60
	}
	db, err := newDatabase(ctx, opts.AdminURL, 40)
	if err != nil {
		return err
	}
	defer db.drop()

	p, err := startPipeline(ctx, opts, db, instantModel(), true)
	if err != nil {
		return err
	}
	var ours []time.Duration
	for i := range n + 5 {
		t0 := time.Now()
		id, err := insertTask(ctx, db, "latency")
		if err != nil {
			p.stop(ctx)
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = waitFor(wctx, p.timed.done, id)
		cancel()
		if err != nil {
			p.stop(ctx)
			return err
		}
		if i >= 5 { // warm-up
			ours = append(ours, p.timed.startedAt(id).Sub(t0))
		}
	}
	p.stop(ctx)

	river, err := riverLatency(ctx, opts, db, n)
	if err != nil {
		return err
	}
	r.LatencyMS = percentiles(ours)
	r.RiverLatencyMS = percentiles(river)
	r.LatencyRatio = ratio(r.LatencyMS.P50, r.RiverLatencyMS.P50)
	return nil
}

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench_noop" }

func riverLatency(ctx context.Context, opts Options, db *database, n int) ([]time.Duration, error) {
	started := make(chan time.Time, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		started <- time.Now()
		return nil
	}))
	client, err := newRiverClient(db, opts, workers)
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer stopRiver(ctx, client)
	var out []time.Duration
	for i := range n + 5 {
		t0 := time.Now()
		if _, err := client.Insert(ctx, noopArgs{N: i}, &river.InsertOpts{Queue: worker.TaskQueue}); err != nil {
			return nil, fmt.Errorf("insert river job: %w", err)
		}
		select {
		case at := <-started:
			if i >= 5 {
				out = append(out, at.Sub(t0))
			}
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("raw river job %d not worked within 30s", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// newRiverClient is a River client with the worker's queue and fetch
// settings (worker.Config defaults).
func newRiverClient(db *database, opts Options, workers *river.Workers) (*river.Client[pgx.Tx], error) {
	def := worker.DefaultConfig()
	return river.NewClient(riverpgxv5.New(db.pool), &river.Config{
		Logger:            opts.Logger,
		FetchCooldown:     def.FetchCooldown,
		FetchPollInterval: def.FetchPollInterval,
		Queues:            map[string]river.QueueConfig{worker.TaskQueue: {MaxWorkers: opts.Concurrency}},
		Workers:           workers,
	})
}

func stopRiver(ctx context.Context, c *river.Client[pgx.Tx]) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = c.Stop(sctx)
}
