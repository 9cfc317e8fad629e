package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestSubmitFlags: submit sets a task's agent (by name), priority,
// dependencies, parent and input, and refuses what the API refuses, with
// the API's words, writing nothing.
func TestSubmitFlags(t *testing.T) {
	t.Parallel()
	cfg := config{DatabaseURL: dbtest.NewURL(t)}
	pool, err := pgxpool.New(t.Context(), cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	project := uuid.New()
	agent, err := agentsql.CreateAgent(t.Context(), pool, project, agentsql.AgentFields{Name: new("planner")})
	if err != nil {
		t.Fatal(err)
	}
	submitted := func(t *testing.T, args ...string) (agentsql.Task, error) {
		t.Helper()
		var out bytes.Buffer
		err := submit(t.Context(), cfg, append([]string{"--project", project.String()}, args...), &out)
		if err != nil {
			return agentsql.Task{}, err
		}
		id, err := uuid.Parse(strings.Fields(out.String())[1])
		if err != nil {
			t.Fatalf("submit printed %q", out.String())
		}
		task, err := agentsql.GetTask(t.Context(), pool, id)
		if err != nil {
			t.Fatal(err)
		}
		return task, nil
	}
	plan, err := submitted(t, "--type", "plan", "--agent", "planner", "--priority", "1", "--input", `{"expand": true}`, "plan the work")
	if err != nil {
		t.Fatal(err)
	}
	if plan.AgentID == nil || *plan.AgentID != agent.ID || plan.Priority != 1 || !strings.Contains(string(plan.Input), `"expand": true`) {
		t.Errorf("plan: agent %v, priority %d, input %s", plan.AgentID, plan.Priority, plan.Input)
	}
	child, err := submitted(t, "--parent", plan.ID.String(), "--depends-on", plan.ID.String(), "--input", `{"review": true}`, "build it")
	if err != nil {
		t.Fatal(err)
	}
	if child.ParentTaskID == nil || *child.ParentTaskID != plan.ID || child.Status != agentsql.StatusWaiting {
		t.Errorf("child: parent %v, status %s; want the plan's child, waiting for it", child.ParentTaskID, child.Status)
	}

	var before int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, project).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		says string
	}{
		{"Priority", []string{"--priority", "5"}, "priority must be 1 (most urgent) to 4"},
		{"Type", []string{"--type", "deploy"}, "type must be chat, plan or build"},
		{"InputNotJSON", []string{"--input", "{expand}"}, "input must be a JSON object"},
		{"ExpandOnBuild", []string{"--input", `{"expand": true}`}, "input.expand applies to plan tasks"},
		{"NegativeBudget", []string{"--input", `{"budget": {"max_cost_usd": -1}}`}, "input.budget"},
		{"UnknownAgent", []string{"--agent", "nobody"}, `--agent "nobody"`},
		{"ParentOfAnotherProject", []string{"--parent", uuid.NewString()}, "INVALID_PARENT_TASK"},
		{"MissingDependency", []string{"--depends-on", uuid.NewString()}, "INVALID_TASK_DEPENDENCY"},
		{"DependencyNotAnID", []string{"--depends-on", "t1"}, `"t1" is not a task id`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := submitted(t, append(tt.args, "x")...)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("submit %v: %v, want a refusal saying %q", tt.args, err, tt.says)
			}
		})
	}
	var after int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, project).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the refused submits wrote %d tasks", after-before)
	}
}
