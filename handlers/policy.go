package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers/tools"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Budget limits what one task may spend. A zero field is no limit.
type Budget struct {
	MaxTokens     int64   `json:"max_tokens"`
	MaxCostUSD    float64 `json:"max_cost_usd"`
	MaxIterations int     `json:"max_iterations"`
}

// within returns the budget asked for, held to ceiling field by field.
func (asked Budget) within(ceiling Budget) Budget {
	return Budget{
		MaxTokens:     capped(asked.MaxTokens, ceiling.MaxTokens),
		MaxCostUSD:    capped(asked.MaxCostUSD, ceiling.MaxCostUSD),
		MaxIterations: capped(asked.MaxIterations, ceiling.MaxIterations),
	}
}

// capped is the limit asked for when it is set and below the ceiling (or
// there is no ceiling), else the ceiling. Zero is no limit.
func capped[T int | int64 | float64](asked, ceiling T) T {
	if asked > 0 && (ceiling == 0 || asked < ceiling) {
		return asked
	}
	return ceiling
}

// taskPolicy is what a task's input sets beyond its prompt.
type taskPolicy struct {
	budget Budget
	// ceiling is the operator's budget, which input.budget may lower but
	// not raise: whoever may insert a task must not spend past it.
	ceiling Budget
	scope   *storage.Scope
	// review: a build that finishes cleanly waits for a person's approval
	// instead of applying its change set (input.review).
	review bool
	// calls are the tool policies of the task's input and of the tasks it
	// is part of: the strictest decision of all holds.
	calls []tools.CallPolicy
}

// within returns p held to every limit of outer, the policy of a task p's
// task is part of: a child may narrow its plan's limits, never widen
// them. A limit added to taskPolicy is inherited here too.
func (p taskPolicy) within(outer taskPolicy) taskPolicy {
	return taskPolicy{
		budget:  p.budget.within(outer.budget),
		ceiling: p.ceiling,
		scope:   p.scope.Within(outer.scope),
		review:  p.review || outer.review,
		calls:   append(slices.Clip(p.calls), outer.calls...),
	}
}

// policyOf reads the task's policy: its input's, held to the policies of
// the tasks it is part of (a plan's children inherit its limits).
func (r *Runner) policyOf(ctx context.Context, task agentsql.Task) (taskPolicy, error) {
	p, err := r.inputPolicy(task.ID, task.Input)
	if err != nil || task.ParentTaskID == nil {
		return p, err
	}
	ancestors, err := agentsql.AncestorInputs(ctx, r.deps.Pool, task.ID)
	if err != nil {
		return p, err
	}
	for _, a := range ancestors {
		outer, err := r.inputPolicy(a.ID, a.Input)
		if err != nil {
			return p, err
		}
		p = p.within(outer)
	}
	return p, nil
}

// inputPolicy reads input.budget (within the runner's ceilings),
// input.allowed_paths and input.review of task id.
func (r *Runner) inputPolicy(id uuid.UUID, input []byte) (taskPolicy, error) {
	var in struct {
		Budget       *Budget         `json:"budget"`
		AllowedPaths []string        `json:"allowed_paths"`
		Review       bool            `json:"review"`
		ToolPolicy   json.RawMessage `json:"tool_policy"`
	}
	ceiling := Budget{MaxTokens: r.cfg.Budget.MaxTokens, MaxCostUSD: r.cfg.Budget.MaxCostUSD, MaxIterations: r.cfg.MaxIterations}
	p := taskPolicy{budget: ceiling, ceiling: ceiling}
	if len(input) > 0 {
		if err := json.Unmarshal(input, &in); err != nil {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input of task %s: %w", id, err)}
		}
	}
	if b := in.Budget; b != nil {
		if b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.MaxIterations < 0 {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input.budget of task %s: limits must not be negative", id)}
		}
		p.budget = b.within(ceiling)
	}
	scope, err := storage.NewScope(in.AllowedPaths)
	if err != nil {
		return p, &taskError{CodeInvalidInput, fmt.Errorf("input.allowed_paths of task %s: %w", id, err)}
	}
	p.scope, p.review = scope, in.Review
	calls, err := tools.ParseCallPolicy(in.ToolPolicy)
	if err != nil {
		return p, &taskError{CodeInvalidInput, fmt.Errorf("input of task %s: %w", id, err)}
	}
	if len(calls) > 0 {
		p.calls = []tools.CallPolicy{calls}
	}
	return p, nil
}
