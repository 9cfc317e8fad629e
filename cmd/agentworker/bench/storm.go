package bench

import (
	"context"
	"fmt"

	"github.com/agentworker/agentworker/llm/scripted"
)

// Storm is builds against a provider that refuses a share of all calls at
// random (429 with Retry-After: 1) whatever their pace, and the same
// builds without the storm: refusals the pace does not explain are waited
// out call by call and leave the pace alone.
type Storm struct {
	Tasks        int     `json:"tasks"`
	CallsPerTask int     `json:"calls_per_task"`
	Share        float64 `json:"share"` // of calls refused at random
	// Storm and Calm are the runs with and without the refusals. Goals:
	// no failed task, refused ≤ 2× answered, Storm's wall within 20 s of
	// Calm's.
	Storm ProviderLimitRun `json:"storm"`
	Calm  ProviderLimitRun `json:"calm"`
	// ExtraS is Storm's wall less Calm's.
	ExtraS float64 `json:"extra_s"`
}

func runStorm(ctx context.Context, opts Options, r *Report) error {
	if opts.Binary == "" {
		r.note("storm: skipped (no agentworker binary given)")
		return nil
	}
	s := &r.Storm
	s.Tasks, s.CallsPerTask, s.Share = 200, 2, 0.4
	if opts.Quick {
		s.Tasks = 50
	}
	root, _ := filesRoot()
	var err error
	if s.Calm, err = providerLimitRun(ctx, opts, root, 1, nil, s.Tasks); err != nil {
		return fmt.Errorf("without the storm: %w", err)
	}
	if s.Storm, err = providerLimitRun(ctx, opts, root, 1, &scripted.RateLimit{Storm: s.Share, Seed: 46}, s.Tasks); err != nil {
		return fmt.Errorf("in the storm: %w", err)
	}
	s.ExtraS = s.Storm.WallS - s.Calm.WallS
	r.note("storm: %d build tasks of %d model calls inserted in one statement, worked by one `agentworker serve` at the default WORKER_CONCURRENCY, against an instant scripted provider that refuses %.0f %% of calls at random with 429 and Retry-After: 1 (storm), and against the same provider without refusals (calm); wall from the insert to the last finish, by the database's clock",
		s.Tasks, s.CallsPerTask, 100*s.Share)
	return nil
}
