package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
)

// Graph is the task graph scenario: chains of dependent tasks, the time
// from a dependency's finish to its dependent's start beside the pickup of
// a lone independent task, and throughput beside the same tasks without
// dependencies.
type Graph struct {
	Chains      int         `json:"chains"`
	ChainLength int         `json:"chain_length"`
	Concurrency int         `json:"concurrency"`
	HandoffMS   Percentiles `json:"handoff_ms"`
	// PickupMS is the insert → start of independent tasks inserted one at
	// a time while the chains run: what a handoff is held to, under the
	// same load (waiting for a turn to work like the dependents do).
	PickupMS Percentiles `json:"pickup_ms"`
	// IdlePickupMS is the same on an idle worker.
	IdlePickupMS Percentiles `json:"idle_pickup_ms"`
	// HandoffRatio is the handoff's p50 over the pickup's p50.
	HandoffRatio  float64 `json:"handoff_ratio"`
	TasksPerS     float64 `json:"tasks_per_s"`
	FlatTasksPerS float64 `json:"flat_tasks_per_s"`
	// Diamonds run beside none of the above: A, then B and C after A, then
	// D after both. FanInHandoffMS is D's start after the later of B's and
	// C's finish; DiamondHandoffMS, B's and C's start after A's.
	Diamonds         int         `json:"diamonds"`
	DiamondHandoffMS Percentiles `json:"diamond_handoff_ms"`
	FanInHandoffMS   Percentiles `json:"fan_in_handoff_ms"`
	DiamondPickupMS  Percentiles `json:"diamond_pickup_ms"`
	DiamondTasksPerS float64     `json:"diamond_tasks_per_s"`
}

// runGraph runs chains of dependent tasks (instant model) on a worker with
// a slot for every chain, so a handoff waits for nothing but the graph: the
// dependency's commit queues its dependent, whose job River picks up as it
// picks up any new one.
func runGraph(ctx context.Context, opts Options, r *Report) error {
	g := Graph{Chains: 100, ChainLength: 10, Concurrency: 100}
	if opts.Quick {
		g.Chains, g.ChainLength = 20, 5
	}
	opts.Concurrency = g.Concurrency
	n := g.Chains * g.ChainLength

	idle, err := lonePickups(ctx, opts, 50)
	if err != nil {
		return err
	}
	g.IdlePickupMS = percentiles(idle)
	if g.FlatTasksPerS, _, _, err = graphRun(ctx, opts, g.Chains, flatShape(g.ChainLength)); err != nil {
		return err
	}
	var handoffs map[int][]time.Duration
	var pickups []time.Duration
	if g.TasksPerS, handoffs, pickups, err = graphRun(ctx, opts, g.Chains, chainShape(g.ChainLength)); err != nil {
		return err
	}
	g.HandoffMS, g.PickupMS = percentiles(handoffs[1]), percentiles(pickups)
	g.HandoffRatio = ratio(g.HandoffMS.P50, g.PickupMS.P50)
	g.Diamonds = g.Chains * g.ChainLength / 4
	if g.DiamondTasksPerS, handoffs, pickups, err = graphRun(ctx, opts, g.Diamonds, diamondShape); err != nil {
		return err
	}
	g.DiamondHandoffMS, g.FanInHandoffMS, g.DiamondPickupMS = percentiles(handoffs[1]), percentiles(handoffs[2]), percentiles(pickups)
	r.Graph = g
	r.note("graph: %d chains of %d tasks (%d in all) on %d slots; a handoff is a dependency's handler return to its dependent's handler start (a fan-in's, from the later of its two dependencies); a pickup, an independent task's insert to its handler start, one inserted every %s while the graphs run (%d at most); then %d diamonds (A; B, C after A; D after both)",
		g.Chains, g.ChainLength, n, g.Concurrency, probeEvery, maxProbes, g.Diamonds)
	return nil
}

// A shape is one graph of tasks: for each, the indexes of the tasks before
// it that it depends on.
type shape [][]int

func flatShape(n int) shape { return make(shape, n) }

func chainShape(n int) shape {
	s := make(shape, n)
	for i := 1; i < n; i++ {
		s[i] = []int{i - 1}
	}
	return s
}

var diamondShape = shape{nil, {0}, {0}, {1, 2}}

// lonePickups inserts n tasks one at a time on an idle worker and returns
// each one's insert → handler start.
func lonePickups(ctx context.Context, opts Options, n int) ([]time.Duration, error) {
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	p, err := startPipeline(ctx, opts, db, instantModel(), true)
	if err != nil {
		return nil, err
	}
	defer p.stop(ctx)
	var out []time.Duration
	for range n {
		t0 := time.Now()
		task, err := agentsql.InsertTask(ctx, db.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "graph"})
		if err != nil {
			return nil, err
		}
		if err := waitHandled(ctx, p, 1); err != nil {
			return nil, err
		}
		out = append(out, p.timed.startedAt(task.ID).Sub(t0))
	}
	return out, nil
}

// An independent task is inserted every probeEvery while the chains run,
// maxProbes at most: few enough to add little to the load they measure.
const (
	probeEvery = 250 * time.Millisecond
	maxProbes  = 50
)

// graphRun queues graphs copies of sh, each in a project of its own,
// starts the worker, and returns tasks/s and, when sh has dependencies,
// every handoff by the number of dependencies of its task and the pickups
// of independent tasks inserted meanwhile.
func graphRun(ctx context.Context, opts Options, graphs int, sh shape) (perS float64, handoffs map[int][]time.Duration, pickups []time.Duration, err error) {
	chains, length := graphs, len(sh)
	chained := false
	for _, deps := range sh {
		chained = chained || len(deps) > 0
	}
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	defer db.drop()
	ids := make([][]uuid.UUID, chains)
	for c := range chains {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			project := uuid.New()
			for i := range length {
				nt := agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "graph"}
				for _, d := range sh[i] {
					nt.DependsOn = append(nt.DependsOn, ids[c][d])
				}
				task, err := agentsql.InsertTask(ctx, tx, nt)
				if err != nil {
					return err
				}
				ids[c] = append(ids[c], task.ID)
			}
			return nil
		})
		if err != nil {
			return 0, nil, nil, fmt.Errorf("queue chain %d: %w", c, err)
		}
	}
	p, err := startPipeline(ctx, opts, db, instantModel(), false)
	if err != nil {
		return 0, nil, nil, err
	}
	t0 := time.Now()
	if err := p.svc.Start(ctx); err != nil {
		p.stop(ctx)
		return 0, nil, nil, err
	}
	probes := map[uuid.UUID]time.Time{}
	stopProbes := make(chan struct{})
	probed := make(chan error, 1)
	go func() {
		if !chained {
			probed <- nil
			return
		}
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopProbes:
				probed <- nil
				return
			case <-tick.C:
				if len(probes) == maxProbes {
					continue
				}
				at := time.Now()
				task, err := agentsql.InsertTask(ctx, db.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "probe"})
				if err != nil {
					probed <- err
					return
				}
				probes[task.ID] = at
			}
		}
	}()
	queued := map[uuid.UUID]bool{}
	for _, chain := range ids {
		for _, id := range chain {
			queued[id] = true
		}
	}
	var elapsed time.Duration
	probesDone := 0
	deadline := time.After(10 * time.Minute)
	for len(queued) > 0 && err == nil {
		select {
		case id := <-p.timed.done:
			if queued[id] {
				delete(queued, id)
			} else {
				probesDone++
			}
		case <-deadline:
			err = fmt.Errorf("%d of %d tasks not done after 10 minutes", len(queued), chains*length)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	elapsed = time.Since(t0)
	close(stopProbes)
	if perr := <-probed; err == nil {
		err = perr
	}
	if err == nil {
		err = waitHandled(ctx, p, len(probes)-probesDone)
	}
	p.stop(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	if chained {
		handoffs = map[int][]time.Duration{}
		p.timed.mu.Lock()
		for _, graph := range ids {
			for i, deps := range sh {
				if len(deps) == 0 {
					continue
				}
				var ready time.Time
				for _, d := range deps {
					if f := p.timed.finished[graph[d]]; f.After(ready) {
						ready = f
					}
				}
				handoffs[len(deps)] = append(handoffs[len(deps)], p.timed.started[graph[i]].Sub(ready))
			}
		}
		for id, at := range probes {
			pickups = append(pickups, p.timed.started[id].Sub(at))
		}
		p.timed.mu.Unlock()
	}
	return float64(chains*length) / elapsed.Seconds(), handoffs, pickups, nil
}

// waitHandled waits for n tasks' handlers to return.
func waitHandled(ctx context.Context, p *pipeline, n int) error {
	deadline := time.After(10 * time.Minute)
	for i := range n {
		select {
		case <-p.timed.done:
		case <-deadline:
			return fmt.Errorf("only %d of %d tasks done after 10 minutes", i, n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
