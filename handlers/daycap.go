package handlers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// maxUncapped bounds the projects uncapped remembers; past it the stale
// ones are forgotten.
const maxUncapped = 10_000

// uncapped remembers, for ttl, the projects found without a daily cap, so
// that their model calls read nothing. A project is forgotten as soon as
// it is found capped.
type uncapped struct {
	ttl  time.Duration
	mu   sync.Mutex
	seen map[uuid.UUID]time.Time // when each was found without a cap
}

func newUncapped(ttl time.Duration) *uncapped {
	return &uncapped{ttl: ttl, seen: map[uuid.UUID]time.Time{}}
}

// known reports whether project was found without a cap within ttl of now.
func (u *uncapped) known(project uuid.UUID, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.seen[project]
	return ok && now.Sub(at) < u.ttl
}

// note records what a read found for project at now.
func (u *uncapped) note(project uuid.UUID, capped bool, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if capped {
		delete(u.seen, project)
		return
	}
	if len(u.seen) >= maxUncapped {
		for p, at := range u.seen {
			if now.Sub(at) >= u.ttl {
				delete(u.seen, p)
			}
		}
	}
	if len(u.seen) < maxUncapped {
		u.seen[project] = now
	}
}

// underDayCap stops the loop before a model call when the project's spend
// of the UTC day, with this attempt's spend not yet recorded, is at its
// daily cap. Every task records its spend after each model call, so the
// cap is overshot by at most the calls in flight: one per running task.
// It is read here, after the last checkpoint committed, never in the
// checkpoint's transaction: a read there misses the spend that other
// tasks' checkpoints are committing at the same moment, and each of them
// would make one call more.
//
// Before the first call the claim's read serves (the claim committed on
// its own, after every spend before it). Without an operator's cap, a
// project that had no cap of its own when the last checkpoint was saved
// (which reads that, not the spend) is not read, nor is a project found
// without one for Config.DayCapRecheck.
func (r *taskRun) underDayCap(ctx context.Context) error {
	rn := r.runner
	defaulted := rn.cfg.ProjectMaxCostUSDPerDay > 0
	claimed, capped := r.dayCapRead, r.cappedRead
	r.dayCapRead, r.cappedRead = nil, nil
	if !defaulted && claimed == nil && (capped != nil && !*capped || rn.uncapped.known(r.task.ProjectID, time.Now())) {
		return nil
	}
	var c agentsql.DayCap
	// The claim's read serves unless it found no cap where this runner
	// has a default (the claim was given another): its spend was not
	// summed then.
	if claimed != nil && (claimed.CapUSD != nil || !defaulted) {
		c = *claimed
	} else {
		var err error
		if c, err = agentsql.ReadDayCap(ctx, rn.deps.Pool, r.task.ProjectID, rn.cfg.ProjectMaxCostUSDPerDay); err != nil {
			return err
		}
	}
	if !defaulted {
		rn.uncapped.note(r.task.ProjectID, c.CapUSD != nil, time.Now())
	}
	if !c.Reached(r.lp.unrecorded().Cost) {
		return nil
	}
	return &Suspension{Status: agentsql.StatusPaused, Code: CodeDayCap, Reason: ReasonBudgetExceeded,
		Message: fmt.Sprintf("the project's daily cost cap of $%.4f is reached: $%.4f spent today (UTC); "+
			"the task resumes when the cap is raised or the UTC day turns", *c.CapUSD, c.SpentUSD+r.lp.unrecorded().Cost)}
}
