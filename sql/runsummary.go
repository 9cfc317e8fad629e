package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RunGroup summarizes a project's runs of one UTC day, agent, status and
// error code.
type RunGroup struct {
	Day       time.Time  `json:"-"`
	AgentID   *uuid.UUID `json:"agent_id,omitempty"`
	Status    string     `json:"status"`
	ErrorCode string     `json:"error_code,omitempty"`
	Runs      int64      `json:"runs"`
	// Retries counts the runs past their task's first attempt that retry
	// it: all but those after a run that succeeded (a review's revision,
	// its approve) or was suspended (interrupted by a pause, a question or
	// a budget: resumed, not retried).
	Retries   int64   `json:"retries"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	Cost      float64 `json:"cost_usd"`
	// RateLimitWaitMS is the time the runs' model calls waited for the
	// provider's rate limit, in milliseconds.
	RateLimitWaitMS int64 `json:"rate_limit_wait_ms"`
	// Durations, of the runs that started and ended, in milliseconds.
	AvgMS float64 `json:"avg_ms"`
	P95MS float64 `json:"p95_ms"`
	MaxMS float64 `json:"max_ms"`
}

// ProjectRunSummary groups the project's runs started over the last days
// UTC days (today included) by day, agent, status and error code, newest
// day first.
func ProjectRunSummary(ctx context.Context, db DBTX, projectID uuid.UUID, days int) ([]RunGroup, error) {
	rows, err := db.Query(ctx, `SELECT (coalesce(r.started_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
			t.agent_id, r.status, coalesce(r.error_code, '') AS code,
			count(*), count(*) FILTER (WHERE r.attempt > 1 AND NOT EXISTS (SELECT 1 FROM task_runs p
				WHERE p.task_id = r.task_id AND p.attempt = r.attempt - 1
				  AND (p.status = 'succeeded'
				       OR p.status = 'interrupted' AND (p.error_code IN ('paused', 'awaiting_input') OR p.error_code LIKE 'budget%')))),
			sum(r.tokens_in), sum(r.tokens_out), sum(r.cost)::float8, sum(r.rate_limit_wait_ms)::bigint,
			coalesce(avg(d.ms), 0), coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY d.ms), 0), coalesce(max(d.ms), 0)
		FROM ai_tasks t JOIN task_runs r ON r.task_id = t.id
		CROSS JOIN LATERAL (SELECT extract(epoch FROM r.finished_at - r.started_at)::float8 * 1000 AS ms) d
		WHERE t.project_id = $1
		  AND coalesce(r.started_at, r.created_at) >= ((now() AT TIME ZONE 'UTC')::date - ($2::int - 1)) AT TIME ZONE 'UTC'
		GROUP BY day, t.agent_id, r.status, code
		ORDER BY day DESC, count(*) DESC, r.status, code`, projectID, days)
	if err != nil {
		return nil, fmt.Errorf("run summary of project %s: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunGroup, error) {
		var g RunGroup
		err := row.Scan(&g.Day, &g.AgentID, &g.Status, &g.ErrorCode, &g.Runs, &g.Retries,
			&g.TokensIn, &g.TokensOut, &g.Cost, &g.RateLimitWaitMS, &g.AvgMS, &g.P95MS, &g.MaxMS)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("run summary of project %s: %w", projectID, err)
	}
	return out, nil
}
