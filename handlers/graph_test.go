package handlers_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func (h *harness) agent(t *testing.T, name, persona string, tools []string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO agents (project_id, name, role, persona, tools) VALUES ($1, $2, 'test role', $3, $4) RETURNING id`,
		h.project, name, persona, tools).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTaskRunsAsItsAgent: the agent's persona is in the system prompt of
// every model call of its task, and the tools offered are the type's
// narrowed to the agent's: a chat agent listing write_file does not gain it.
func TestTaskRunsAsItsAgent(t *testing.T) {
	t.Parallel()
	prices := llm.DefaultPrices()
	prices["agent-model"] = llm.Price{InPer1K: 0.001, OutPer1K: 0.002}
	h := setup(t, []scripted.Reply{call("read_file", m{"path": "a.txt"}), llmtest.Text("It says a.")}, handlers.Config{Prices: prices}, map[string]string{"a.txt": "a\n"})
	agent := h.agent(t, "reader", "You answer in one short sentence.", []string{"read_file", "write_file"})
	if _, err := h.pool.Exec(t.Context(), `UPDATE agents SET model = 'agent-model' WHERE id = $1`, agent); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, agent_id) VALUES ($1, 'chat', 'what does a.txt say?', $2) RETURNING id`,
		h.project, agent).Scan(&id); err != nil {
		t.Fatal(err)
	}
	_, task := h.wait(t, id)
	if res := result(t, task); res.Model != "agent-model" || task.Model != "agent-model" {
		t.Errorf("the result says model %q, the task %q; want the agent's", res.Model, task.Model)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	for i, req := range reqs {
		if req.Model != "agent-model" {
			t.Errorf("call %d asked for model %q, want the agent's", i, req.Model)
		}
		if sys := req.Messages[0].Content; !strings.Contains(sys, `You are the agent "reader" (test role)`) || !strings.Contains(sys, "You answer in one short sentence.") {
			t.Errorf("call %d's system prompt lacks the agent: %q", i, sys)
		}
		var names []string
		for _, tool := range req.Tools {
			names = append(names, tool.Name)
		}
		if !slices.Equal(names, []string{"read_file"}) {
			t.Errorf("call %d offered %v, want only read_file (the chat type's tools narrowed to the agent's)", i, names)
		}
	}
}

// TestPlanExpandsIntoTasks: a plan with input.expand plans tasks, which
// become its children with their agents, priorities and dependencies when
// it succeeds; a child sees its own planned task, not the plan.
func TestPlanExpandsIntoTasks(t *testing.T) {
	t.Parallel()
	plan := handlers.Plan{Summary: "Login, then its review.", Steps: []handlers.PlanStep{}, Tasks: []handlers.PlanTask{
		{Key: "t1", Title: "Login page", Prompt: "Add a login page", Type: "build", Agent: "coder", Priority: 1, DependsOn: []string{}},
		{Key: "t2", Title: "Review", Prompt: "Review the login page", Type: "chat", Agent: "", Priority: 3, DependsOn: []string{"t1"}},
	}}
	h := setup(t, planReplies(plan), handlers.Config{}, map[string]string{"src/main.ts": "console.log('hi')\n"})
	coder := h.agent(t, "coder", "", nil)
	planID := h.insert(t, "plan", "add a login page and review it", m{"expand": true})
	_, planTask := h.wait(t, planID)
	if res := result(t, planTask); len(res.Plan.Tasks) != 2 {
		t.Fatalf("plan result = %s", planTask.Result)
	}
	if req := h.llm.Requests()[2]; !strings.Contains(string(req.Body), `"tasks"`) || !strings.Contains(req.Messages[len(req.Messages)-1].Content, "coder") {
		t.Errorf("the structured plan request asks for no tasks, or names no agent: %s", req.Body)
	}

	rows, err := h.pool.Query(t.Context(), `SELECT id, status, priority, agent_id, prompt, input FROM ai_tasks WHERE parent_task_id = $1 ORDER BY priority`, planID)
	if err != nil {
		t.Fatal(err)
	}
	type child struct {
		ID       uuid.UUID
		Status   agentsql.Status
		Priority int
		AgentID  *uuid.UUID
		Prompt   string
		Input    json.RawMessage
	}
	children, err := pgx.CollectRows(rows, pgx.RowToStructByPos[child])
	if err != nil || len(children) != 2 {
		t.Fatalf("children: %+v, %v", children, err)
	}
	// The harness's worker picks t1 up at once (and fails it: its script is
	// spent), so t1 is anything but waiting, and t2 waits, or is blocked
	// once t1 failed.
	t1, t2 := children[0], children[1]
	if t1.Status == agentsql.StatusWaiting || t1.AgentID == nil || *t1.AgentID != coder || t1.Prompt != "Add a login page" {
		t.Errorf("t1 = %+v (%s)", t1, t1.Input)
	}
	// The child's input is its own planned task and nothing of the plan.
	var in map[string]map[string]any
	if err := json.Unmarshal(t1.Input, &in); err != nil {
		t.Fatalf("t1 input %s: %v", t1.Input, err)
	}
	if want := map[string]any{"plan_task_id": planID.String(), "key": "t1", "title": "Login page"}; len(in) != 1 || !maps.Equal(in["planned_task"], want) {
		t.Errorf("t1 input = %s, want only its planned task %v", t1.Input, want)
	}
	if (t2.Status != agentsql.StatusWaiting && t2.Status != agentsql.StatusBlocked) || t2.AgentID != nil || t2.Priority != 3 {
		t.Errorf("t2 = %+v", t2)
	}
	deps, _, _, err := agentsql.TaskRelations(t.Context(), h.pool, t2.ID)
	if err != nil || len(deps) != 1 || deps[0] != t1.ID {
		t.Errorf("t2 depends on %v (%v), want t1 %s", deps, err, t1.ID)
	}
}

// TestPlanTasksRefused: a planned task naming an unknown agent, a
// dependency outside the plan or a cycle fails the plan with plan_invalid,
// and nothing is created.
func TestPlanTasksRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		tasks []handlers.PlanTask
		want  string
	}{
		{"UnknownAgent", []handlers.PlanTask{{Key: "a", Prompt: "x", Type: "chat", Agent: "ghost", DependsOn: []string{}}}, `"ghost" is not an agent`},
		{"UnknownDependency", []handlers.PlanTask{{Key: "a", Prompt: "x", Type: "chat", DependsOn: []string{"b"}}}, `depends on "b"`},
		{"Cycle", []handlers.PlanTask{{Key: "a", Prompt: "x", Type: "chat", DependsOn: []string{"b"}}, {Key: "b", Prompt: "y", Type: "chat", DependsOn: []string{"a"}}}, "cycle"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, planReplies(handlers.Plan{Summary: "s", Steps: []handlers.PlanStep{}, Tasks: tt.tasks}), handlers.Config{}, map[string]string{"a.txt": "a\n"})
			id := h.insert(t, "plan", "plan it", m{"expand": true})
			_, task := h.wait(t, id)
			te := taskError(t, task)
			if task.Status != agentsql.StatusFailed || te.Code != handlers.CodePlanInvalid || !strings.Contains(te.Message, tt.want) {
				t.Fatalf("status %s, error %+v; want plan_invalid saying %q", task.Status, te, tt.want)
			}
			var n int
			if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE parent_task_id = $1`, id).Scan(&n); err != nil || n != 0 {
				t.Errorf("%d children created (%v)", n, err)
			}
		})
	}
}

// TestPlanChildrenInheritLimits: a plan's children are held to its limits.
// A plan limited to docs/** and asking for review expands into a build
// that tries a file at the project root: the write is refused as out of
// scope, the write under docs/ is staged, and the build waits for review
// with nothing applied.
func TestPlanChildrenInheritLimits(t *testing.T) {
	t.Parallel()
	plan := handlers.Plan{Summary: "Document it.", Steps: []handlers.PlanStep{}, Tasks: []handlers.PlanTask{
		{Key: "t1", Title: "Guide", Prompt: "Write the guide", Type: "build", DependsOn: []string{}},
	}}
	replies := append(planReplies(plan),
		call("write_file", m{"path": "ESCAPED_SCOPE.txt", "content": "outside\n"}),
		call("write_file", m{"path": "docs/guide.md", "content": "# Guide\n"}),
		llmtest.Text("Wrote the guide."))
	h := setup(t, replies, handlers.Config{}, map[string]string{"README.md": "readme\n"})
	planID := h.insert(t, "plan", "document the project", m{"expand": true, "allowed_paths": []string{"docs/**"}, "review": true})
	if _, planTask := h.wait(t, planID); planTask.Status != agentsql.StatusSucceeded {
		t.Fatalf("plan %s: %s", planTask.Status, planTask.Error)
	}
	var child uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `SELECT id FROM ai_tasks WHERE parent_task_id = $1`, planID).Scan(&child); err != nil {
		t.Fatal(err)
	}
	h.waitReview(t, child, 0)
	files := h.files(t)
	if _, ok := files["ESCAPED_SCOPE.txt"]; ok {
		t.Error("the child wrote ESCAPED_SCOPE.txt outside its plan's allowed_paths")
	}
	if _, ok := files["docs/guide.md"]; ok {
		t.Error("docs/guide.md applied before review: the child did not inherit its plan's review")
	}
	if out := toolOutput(t, h, len(h.llm.Requests())-2); !strings.Contains(fmt.Sprint(out), "allowed_paths") {
		t.Errorf("the refused write told the model %v, want its allowed_paths", out)
	}
	entries, err := agentsql.ListChangeEntries(t.Context(), h.pool, child)
	if err != nil || len(entries) != 1 || entries[0].Path != "docs/guide.md" {
		t.Errorf("staged %+v (%v), want only docs/guide.md", entries, err)
	}
}

// TestUnpricedModelNeverCallsTheProvider: a task whose agent or own model
// (written by SQL, past the API's check) has no price fails before its
// first model call, saying which model and how to price it; a model the
// operator priced, even at 0, runs.
func TestUnpricedModelNeverCallsTheProvider(t *testing.T) {
	t.Parallel()
	prices := llm.DefaultPrices()
	prices["self-hosted"] = llm.Price{}
	h := setup(t, []scripted.Reply{llmtest.Text("Done.")}, handlers.Config{Prices: prices}, map[string]string{"a.txt": "a\n"})
	agent := h.agent(t, "spender", "", nil)
	if _, err := h.pool.Exec(t.Context(), `UPDATE agents SET model = 'o1-pro' WHERE id = $1`, agent); err != nil {
		t.Fatal(err)
	}
	insert := func(agent *uuid.UUID, model *string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, agent_id, model) VALUES ($1, 'chat', 'hi', $2, $3) RETURNING id`,
			h.project, agent, model).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	unpriced, selfHosted := "o1-pro", "self-hosted"
	for name, id := range map[string]uuid.UUID{"AgentModel": insert(&agent, nil), "TaskModel": insert(nil, &unpriced)} {
		_, task := h.wait(t, id)
		var terr handlers.TaskError
		if task.Status != agentsql.StatusFailed || json.Unmarshal(task.Error, &terr) != nil || terr.Code != handlers.CodeModelUnpriced ||
			terr.Recoverable || !strings.Contains(terr.Message, `model "o1-pro" has no price`) || !strings.Contains(terr.Message, "LLM_PRICES") {
			t.Errorf("%s: status %s, error %s; want failed, %s", name, task.Status, task.Error, handlers.CodeModelUnpriced)
		}
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Fatalf("%d model calls for tasks of an unpriced model, want none", n)
	}
	if _, task := h.wait(t, insert(nil, &selfHosted)); task.Status != agentsql.StatusSucceeded {
		t.Errorf("a task of a model priced at 0: %s %s", task.Status, task.Error)
	}
}
