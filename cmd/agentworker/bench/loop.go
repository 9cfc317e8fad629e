package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
)

// runLoopOverhead measures the agent loop's own time per iteration, with
// the LLM call excluded: the agent_loop stage's duration minus the time
// spent inside each LLM call, over the iterations.
func runLoopOverhead(ctx context.Context, opts Options, r *Report) error {
	const iterations = 10
	tasks := 20
	if opts.Quick {
		tasks = 5
	}
	var err error
	if r.LoopOverheadMS, err = loopOverhead(ctx, opts, tasks, iterations); err != nil {
		return err
	}
	r.note("loop overhead: %d tasks × %d tool iterations (+1 finish), per iteration: events, tool call on the %s store, bookkeeping", tasks, iterations, opts.StoreName)
	return nil
}

// loopOverhead runs tasks builds of iterations tool calls each and returns
// the loop's own time per iteration, in milliseconds.
func loopOverhead(ctx context.Context, opts Options, tasks, iterations int) (float64, error) {
	db, err := newDatabase(ctx, opts.AdminURL, 20)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	p, err := startPipeline(ctx, opts, db, iterationsModel(iterations), true)
	if err != nil {
		return 0, err
	}
	defer p.stop(ctx)
	var total time.Duration
	var loops int
	for range tasks {
		id, err := insertTask(ctx, db, "loop overhead")
		if err != nil {
			return 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = waitFor(wctx, p.timed.done, id)
		cancel()
		if err != nil {
			return 0, err
		}
		d, n, err := loopTime(ctx, db, id)
		if err != nil {
			return 0, err
		}
		total += d
		loops += n
	}
	return float64(total.Microseconds()) / 1000 / float64(loops), nil
}

// loopTime returns the agent_loop stage's time minus its LLM calls, and the
// number of iterations.
func loopTime(ctx context.Context, db *database, id uuid.UUID) (time.Duration, int, error) {
	rows, err := agentsql.TaskEventsAfter(ctx, db.pool, id, 0, 10000)
	if err != nil {
		return 0, 0, err
	}
	var enter, exit time.Time
	var llm time.Duration
	iterations := 0
	for _, row := range rows {
		switch row.Type {
		case string(events.TypeProgress):
			var p events.Progress
			if err := json.Unmarshal(row.Payload, &p); err != nil {
				return 0, 0, err
			}
			switch {
			case p.Kind == events.KindStageEnter && p.Stage == "agent_loop":
				enter = row.CreatedAt
			case p.Kind == events.KindStageExit && p.Stage == "agent_loop":
				exit = row.CreatedAt
			case p.Kind == events.KindIterationStart:
				iterations++
			}
		case string(events.TypeLog):
			var l events.Log
			if err := json.Unmarshal(row.Payload, &l); err != nil {
				return 0, 0, err
			}
			if ms, ok := l.Metadata["durationMs"].(float64); ok && l.Message == "llm call" {
				llm += time.Duration(ms * float64(time.Millisecond))
			}
		}
	}
	if enter.IsZero() || exit.IsZero() || iterations == 0 {
		return 0, 0, fmt.Errorf("task %s has no complete agent_loop stage", id)
	}
	return exit.Sub(enter) - llm, iterations, nil
}
