package sql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestProjectNeverChanges: no writer, service_role or the owner, moves a
// task or an agent to another project; a waiting dependent moved so kept
// its edge, and the other project's prompt got its dependency's result.
func TestProjectNeverChanges(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	project, other := uuid.New(), uuid.New()
	dep, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "dependency"})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "dependent", DependsOn: []uuid.UUID{dep.ID}})
	if err != nil {
		t.Fatal(err)
	}
	var agent uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO agents (project_id, name) VALUES ($1, 'coder') RETURNING id`, project).Scan(&agent); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, role, update string }{
		{"TaskAsServiceRole", "service_role", `UPDATE ai_tasks SET project_id = $1 WHERE id = '` + waiting.ID.String() + `'`},
		{"TaskAsOwner", "", `UPDATE ai_tasks SET project_id = $1 WHERE id = '` + waiting.ID.String() + `'`},
		{"AgentAsServiceRole", "service_role", `UPDATE agents SET project_id = $1 WHERE id = '` + agent.String() + `'`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if tt.role != "" {
					if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+tt.role); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, tt.update, other)
				return err
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "PROJECT_FIXED") || !strings.HasSuffix(pgErr.ConstraintName, "_project_fixed") {
				t.Fatalf("moving to another project: %v, want PROJECT_FIXED", err)
			}
		})
	}
	if task, err := agentsql.GetTask(ctx, pool, waiting.ID); err != nil || task.ProjectID != project {
		t.Errorf("the dependent is in project %s (%v), want %s", task.ProjectID, err, project)
	}
}

// TestAgentColumnsAreTheDatabases: an authenticated bearer writes an
// agent's own fields, never its version, times or id, and cannot move it
// to another project even one it may write.
func TestAgentColumnsAreTheDatabases(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	project, other := uuid.New(), uuid.New()
	var agent uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO agents (project_id, name) VALUES ($1, 'coder') RETURNING id`, project).Scan(&agent); err != nil {
		t.Fatal(err)
	}
	bearer := `{"role": "authenticated", "sub": "alice", "projects": ["` + project.String() + `", "` + other.String() + `"]}`
	for _, tt := range []struct {
		name, q string
		denied  bool
	}{
		{"Name", `UPDATE agents SET name = 'reviewer' WHERE id = '` + agent.String() + `'`, false},
		{"Version", `UPDATE agents SET version = 99 WHERE id = '` + agent.String() + `'`, true},
		{"CreatedAt", `UPDATE agents SET created_at = now() - interval '10 years' WHERE id = '` + agent.String() + `'`, true},
		{"UpdatedAt", `UPDATE agents SET updated_at = now() + interval '1 day' WHERE id = '` + agent.String() + `'`, true},
		{"Project", `UPDATE agents SET project_id = '` + other.String() + `' WHERE id = '` + agent.String() + `'`, true},
		{"InsertVersion", `INSERT INTO agents (project_id, name, version) VALUES ('` + project.String() + `', 'a2', 99)`, true},
		{"InsertCreatedAt", `INSERT INTO agents (project_id, name, created_at) VALUES ('` + project.String() + `', 'a3', '2000-01-01')`, true},
		{"InsertID", `INSERT INTO agents (id, project_id, name) VALUES (gen_random_uuid(), '` + project.String() + `', 'a4')`, true},
		{"Insert", `INSERT INTO agents (project_id, name, role, model, persona, tools, status, review) VALUES ('` + project.String() + `', 'a5', 'r', 'gpt-4o', 'p', NULL, 'enabled', true)`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL ROLE authenticated; SELECT set_config('request.jwt.claims', '`+bearer+`', true)`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, tt.q)
				return err
			})
			var pgErr *pgconn.PgError
			denied := errors.As(err, &pgErr) && pgErr.Code == "42501"
			if denied != tt.denied || (err != nil && !denied) {
				t.Errorf("%s: %v, want denied=%v", tt.q, err, tt.denied)
			}
		})
	}
}
