package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// agentsOf reads the agent a task runs as (nil when it names none) and,
// for a plan whose input asks to expand into tasks, the project's enabled
// agents by name (nil otherwise; empty when the project has none).
func (r *Runner) agentsOf(ctx context.Context, task agentsql.Task) (*agentsql.Agent, map[string]uuid.UUID, error) {
	var agent *agentsql.Agent
	if task.AgentID != nil {
		a, err := agentsql.GetAgent(ctx, r.deps.Pool, *task.AgentID)
		if err != nil {
			return nil, nil, fmt.Errorf("the agent of task %s: %w", task.ID, err)
		}
		agent = &a
	}
	var in struct {
		Expand bool `json:"expand"`
	}
	if len(task.Input) > 0 {
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return nil, nil, &taskError{CodeInvalidInput, fmt.Errorf("input of task %s: %w", task.ID, err)}
		}
	}
	if task.Type != "plan" || !in.Expand {
		return agent, nil, nil
	}
	agents, err := agentsql.ListAgents(ctx, r.deps.Pool, task.ProjectID)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]uuid.UUID{}
	for _, a := range agents {
		if a.Status == "enabled" {
			byName[a.Name] = a.ID
		}
	}
	return agent, byName, nil
}

// agentSection is what the system prompt says of the agent a task runs as:
// its name, role and persona, after the task type's own instructions.
func agentSection(a *agentsql.Agent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n## You are the agent %q", a.Name)
	if a.Role != "" {
		fmt.Fprintf(&b, " (%s)", a.Role)
	}
	b.WriteString("\n")
	if p := strings.TrimSpace(a.Persona); p != "" {
		b.WriteString(p + "\n")
	}
	return b.String()
}

// model is the model the task calls: its own, else its agent's, else the
// worker's (LLM_MODEL).
func (r *taskRun) model() string {
	if r.lp != nil && r.lp.model != "" {
		return r.lp.model
	}
	return r.runner.deps.LLM.Model()
}
