package handlers

import (
	"context"
	"encoding/json"
	"errors"
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

// InputError is a task input the runner would refuse, found before the
// task is created.
type InputError struct{ Message string }

func (e *InputError) Error() string { return e.Message }

// CheckTask refuses, before it is created, a task whose type is not chat,
// plan or build, whose priority is not 0 (the default, 2) or 1 to 4, or
// whose input its run would fail on or silently ignore: input must be a
// JSON object; budget's limits numbers of at least 0; allowed_paths
// project-relative patterns; review (builds) and expand (plans) booleans
// of the type they steer. The API and the submit command create tasks
// through it alike.
func CheckTask(taskType string, priority int, input []byte) error {
	switch taskType {
	case "chat", "plan", "build":
	default:
		return &InputError{"type must be chat, plan or build"}
	}
	if priority < 0 || priority > 4 {
		return &InputError{"priority must be 1 (most urgent) to 4"}
	}
	return checkInput(taskType, input)
}

func checkInput(taskType string, input []byte) error {
	if len(input) == 0 || string(input) == "null" {
		return nil
	}
	var in struct {
		Budget       *Budget         `json:"budget"`
		AllowedPaths []string        `json:"allowed_paths"`
		Review       json.RawMessage `json:"review"`
		Expand       json.RawMessage `json:"expand"`
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil || obj == nil {
		return &InputError{"input must be a JSON object"}
	}
	if err := json.Unmarshal(input, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &InputError{fmt.Sprintf("input.%s must be a %s, not a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)}
		}
		return &InputError{fmt.Sprintf("input: %v", err)}
	}
	if b := in.Budget; b != nil && (b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.MaxIterations < 0) {
		return &InputError{"input.budget: limits must not be negative (0 is no limit)"}
	}
	if _, err := storage.NewScope(in.AllowedPaths); err != nil {
		return &InputError{fmt.Sprintf("input.allowed_paths: %v", err)}
	}
	for _, f := range []struct {
		name, onlyFor string
		raw           json.RawMessage
	}{{"review", "build", in.Review}, {"expand", "plan", in.Expand}} {
		var on bool
		switch {
		case f.raw == nil:
		case json.Unmarshal(f.raw, &on) != nil:
			return &InputError{fmt.Sprintf("input.%s must be true or false", f.name)}
		case on && taskType != f.onlyFor:
			return &InputError{fmt.Sprintf("input.%s applies to %s tasks, not %s", f.name, f.onlyFor, taskType)}
		}
	}
	return nil
}

// jsonKind names a Go kind as JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "int", "int64", "float64":
		return "number"
	case "slice":
		return "list"
	case "struct", "ptr", "map":
		return "object"
	}
	return kind
}
