package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var (
	// ErrAgentNotFound reports that no agents row has the given id.
	ErrAgentNotFound = errors.New("agent not found")
	// ErrAgentVersionConflict reports an update or delete that named a
	// version the agent is no longer at.
	ErrAgentVersionConflict = errors.New("agent version conflict")
)

// Agent is one agents row: who a project's tasks run as.
type Agent struct {
	ID        uuid.UUID `json:"id"`
	ProjectID uuid.UUID `json:"project_id"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Model     string    `json:"model,omitempty"`
	Persona   string    `json:"persona"`
	// Tools narrows the tools of its tasks' type; nil: all the type allows.
	Tools  []string `json:"tools"`
	Status string   `json:"status"` // enabled or disabled
	// Review: a build it runs that finishes cleanly ends in review.
	Review bool `json:"review"`
	// ToolPolicy is the ordered rules deciding each tool call of its
	// tasks (allow, ask or deny); [] allows every call.
	ToolPolicy json.RawMessage `json:"tool_policy"`
	Version    int             `json:"version"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// AgentFields are the fields a create or an update sets; a nil field is
// left as it is (on create: its default). SetTools says Tools is set, so an
// update can set it to nil (all tools).
type AgentFields struct {
	Name, Role, Model, Persona, Status *string
	Review                             *bool
	Tools                              []string
	SetTools                           bool
	// ToolPolicy, when not nil, replaces the agent's tool policy.
	ToolPolicy json.RawMessage
}

const agentColumns = `id, project_id, name, role, coalesce(model, ''), persona, tools, status, review, tool_policy, version, created_at, updated_at`

func scanAgent(row pgx.Row) (Agent, error) {
	var a Agent
	err := row.Scan(&a.ID, &a.ProjectID, &a.Name, &a.Role, &a.Model, &a.Persona, &a.Tools, &a.Status, &a.Review, &a.ToolPolicy, &a.Version, &a.CreatedAt, &a.UpdatedAt)
	return a, err
}

// CreateAgent adds an agent to a project. A name the project has already is
// a *RuleError AGENT_NAME_TAKEN.
func CreateAgent(ctx context.Context, db DBTX, projectID uuid.UUID, f AgentFields) (Agent, error) {
	a, err := scanAgent(db.QueryRow(ctx, `INSERT INTO agents (project_id, name, role, model, persona, tools, status, review, tool_policy)
		VALUES ($1, $2, coalesce($3, ''), nullif($4, ''), coalesce($5, ''), $6, coalesce($7, 'enabled'), coalesce($8, false),
			coalesce($9::jsonb, '[]'))
		RETURNING `+agentColumns,
		projectID, f.Name, f.Role, f.Model, f.Persona, f.Tools, f.Status, f.Review, policyArg(f.ToolPolicy)))
	if err != nil {
		var name string
		if f.Name != nil {
			name = *f.Name
		}
		return Agent{}, fmt.Errorf("create agent %q of project %s: %w", name, projectID, asRuleError(err))
	}
	return a, nil
}

// GetAgent reads one agent.
func GetAgent(ctx context.Context, db DBTX, id uuid.UUID) (Agent, error) {
	a, err := scanAgent(db.QueryRow(ctx, `SELECT `+agentColumns+` FROM agents WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Agent{}, fmt.Errorf("get agent %s: %w", id, ErrAgentNotFound)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("get agent %s: %w", id, err)
	}
	return a, nil
}

// ListAgents reads a project's agents by name.
func ListAgents(ctx context.Context, db DBTX, projectID uuid.UUID) ([]Agent, error) {
	rows, err := db.Query(ctx, `SELECT `+agentColumns+` FROM agents WHERE project_id = $1 ORDER BY name`, projectID)
	if err != nil {
		return nil, fmt.Errorf("list agents of project %s: %w", projectID, err)
	}
	agents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Agent, error) { return scanAgent(r) })
	if err != nil {
		return nil, fmt.Errorf("list agents of project %s: %w", projectID, err)
	}
	return agents, nil
}

// UpdateAgent sets the given fields of an agent at expectedVersion and
// moves it to the next version.
func UpdateAgent(ctx context.Context, db DBTX, id uuid.UUID, expectedVersion int, f AgentFields) (Agent, error) {
	a, err := scanAgent(db.QueryRow(ctx, `UPDATE agents SET
			name = coalesce($3, name), role = coalesce($4, role),
			model = CASE WHEN $5::text IS NULL THEN model ELSE nullif($5, '') END,
			persona = coalesce($6, persona),
			tools = CASE WHEN $8 THEN $7 ELSE tools END,
			status = coalesce($9, status),
			review = coalesce($10, review),
			tool_policy = coalesce($11::jsonb, tool_policy),
			version = version + 1, updated_at = now()
		WHERE id = $1 AND version = $2
		RETURNING `+agentColumns,
		id, expectedVersion, f.Name, f.Role, f.Model, f.Persona, f.Tools, f.SetTools, f.Status, f.Review, policyArg(f.ToolPolicy)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Agent{}, agentMiss(ctx, db, "update", id, expectedVersion)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("update agent %s: %w", id, asRuleError(err))
	}
	return a, nil
}

// DeleteAgent deletes an agent at expectedVersion. One with unfinished tasks
// stays: a *RuleError AGENT_HAS_TASKS.
func DeleteAgent(ctx context.Context, db DBTX, id uuid.UUID, expectedVersion int) error {
	tag, err := db.Exec(ctx, `DELETE FROM agents WHERE id = $1 AND version = $2`, id, expectedVersion)
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", id, asRuleError(err))
	}
	if tag.RowsAffected() == 0 {
		return agentMiss(ctx, db, "delete", id, expectedVersion)
	}
	return nil
}

// agentMiss says why a versioned write of an agent matched no row.
func agentMiss(ctx context.Context, db DBTX, op string, id uuid.UUID, expectedVersion int) error {
	var version int
	err := db.QueryRow(ctx, `SELECT version FROM agents WHERE id = $1`, id).Scan(&version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s agent %s: %w", op, id, ErrAgentNotFound)
	case err != nil:
		return fmt.Errorf("%s agent %s: %w", op, id, err)
	}
	return fmt.Errorf("%s agent %s: at version %d, not the expected %d: %w", op, id, version, expectedVersion, ErrAgentVersionConflict)
}

// policyArg is a tool policy as a query argument: nil leaves the column
// as it is, JSON null is the empty policy.
func policyArg(p json.RawMessage) any {
	switch {
	case p == nil:
		return nil
	case string(p) == "null":
		return "[]"
	}
	return string(p)
}
