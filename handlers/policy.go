package handlers

import (
	"encoding/json"
	"fmt"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Budget limits what one task may spend. A zero field is no limit.
type Budget struct {
	MaxTokens     int64   `json:"max_tokens"`
	MaxCostUSD    float64 `json:"max_cost_usd"`
	MaxIterations int     `json:"max_iterations"`
}

// taskPolicy is what a task's input sets beyond its prompt.
type taskPolicy struct {
	budget Budget
	scope  *storage.Scope
}

// policyOf reads input.budget (over the runner's defaults) and
// input.allowed_paths.
func (r *Runner) policyOf(task agentsql.Task) (taskPolicy, error) {
	var in struct {
		Budget       *Budget  `json:"budget"`
		AllowedPaths []string `json:"allowed_paths"`
	}
	p := taskPolicy{budget: Budget{MaxTokens: r.cfg.Budget.MaxTokens, MaxCostUSD: r.cfg.Budget.MaxCostUSD, MaxIterations: r.cfg.MaxIterations}}
	if len(task.Input) > 0 {
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input of task %s: %w", task.ID, err)}
		}
	}
	if b := in.Budget; b != nil {
		if b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.MaxIterations < 0 {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input.budget of task %s: limits must not be negative", task.ID)}
		}
		if b.MaxTokens > 0 {
			p.budget.MaxTokens = b.MaxTokens
		}
		if b.MaxCostUSD > 0 {
			p.budget.MaxCostUSD = b.MaxCostUSD
		}
		if b.MaxIterations > 0 {
			p.budget.MaxIterations = b.MaxIterations
		}
	}
	scope, err := storage.NewScope(in.AllowedPaths)
	if err != nil {
		return p, &taskError{CodeInvalidInput, fmt.Errorf("input.allowed_paths of task %s: %w", task.ID, err)}
	}
	p.scope = scope
	return p, nil
}
