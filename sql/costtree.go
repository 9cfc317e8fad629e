package sql

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// TreeSpend is what a tree of tasks spent: a root (a task created without
// a parent) with its children and their descendants, those deleted by
// retention included.
type TreeSpend struct {
	RootTaskID uuid.UUID `json:"root_task_id"`
	// Tasks counts the tree's tasks, deleted ones included.
	Tasks     int     `json:"tasks"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
}

// TaskTreeSpend returns the spend of the tree task is part of: its live
// tasks' and the rollup of its deleted ones.
func TaskTreeSpend(ctx context.Context, db DBTX, taskID uuid.UUID) (TreeSpend, error) {
	var s TreeSpend
	err := db.QueryRow(ctx, `WITH root AS (SELECT root_task_id AS id FROM ai_tasks WHERE id = $1),
		spend AS (
			SELECT tokens_in, tokens_out, cost FROM ai_tasks WHERE root_task_id = (SELECT id FROM root)
			UNION ALL
			SELECT tokens_in, tokens_out, cost FROM task_tree_rollup WHERE root_task_id = (SELECT id FROM root))
		SELECT (SELECT id FROM root), count(*)::int, coalesce(sum(tokens_in), 0)::bigint, coalesce(sum(tokens_out), 0)::bigint,
			coalesce(sum(cost), 0)::float8
		FROM spend`, taskID).Scan(&s.RootTaskID, &s.Tasks, &s.TokensIn, &s.TokensOut, &s.CostUSD)
	if err != nil {
		return TreeSpend{}, fmt.Errorf("read the tree spend of task %s: %w", taskID, err)
	}
	return s, nil
}
