package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// awaitingApproval makes a build that waits for approval of calls ids.
func (e *env) awaitingApproval(t *testing.T, project uuid.UUID, ids ...string) agentsql.Task {
	t.Helper()
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
		t.Fatal(err)
	}
	fence := dbtest.HeldBuild(t, tx, project, "write a.txt")
	calls := make([]agentsql.ToolApproval, len(ids))
	for i, id := range ids {
		calls[i] = agentsql.ToolApproval{ToolCallID: id, ToolName: "write_file", Arguments: `{"path": "a.txt", "content": "a"}`}
	}
	var runID uuid.UUID
	if err := tx.QueryRow(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, gen_random_uuid()::text, 'running') RETURNING id`,
		fence.TaskID).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	if err := agentsql.RequestToolApprovals(t.Context(), tx, fence, project, runID, calls); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = 'awaiting_approval' WHERE id = $1`, fence.TaskID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	task, err := agentsql.GetTask(t.Context(), e.pool, fence.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestToolCallEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "authenticated", project)
	other := e.token(t, "mallory", "authenticated", uuid.New())
	task := e.awaitingApproval(t, project, "call_1", "call_2")
	base := "/v1/tasks/" + task.ID.String() + "/tool-calls/"

	var queue api.ToolCallList
	e.get(t, "/v1/projects/"+project.String()+"/tool-calls", tok, &queue)
	if len(queue.ToolCalls) != 2 || queue.ToolCalls[0].Arguments == "" {
		t.Fatalf("approvals queue = %+v", queue)
	}
	for _, tt := range []struct {
		name, path, token, body string
		status                  int
		code                    string
	}{
		{"OtherProject", base + "call_1/approve", other, "", http.StatusForbidden, "FORBIDDEN"},
		{"UnknownCall", base + "call_9/approve", tok, "", http.StatusNotFound, api.CodeToolCallNotFound},
		{"StaleVersion", base + "call_1/approve", tok, `{"expected_version": 1}`, http.StatusConflict, api.CodeVersionConflict},
	} {
		if rp := e.call(t, "POST", tt.path, tt.token, tt.body, nil); rp.status != tt.status || errorCode(t, rp) != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, rp.status, rp.body, tt.status, tt.code)
		}
	}
	rp := e.call(t, "POST", base+"call_1/approve", tok, `{"expected_version": `+strconv.Itoa(task.Version)+`}`, nil)
	var res agentsql.ControlResult
	if rp.status != http.StatusOK || json.Unmarshal(rp.body, &res) != nil || res.Status != agentsql.StatusAwaitingApproval || res.Waiting != 1 {
		t.Fatalf("approve call_1: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", base+"call_1/deny", tok, "", nil); rp.status != http.StatusConflict || errorCode(t, rp) != api.CodeIllegal {
		t.Errorf("deny an approved call: %d %s", rp.status, rp.body)
	}
	rp = e.call(t, "POST", base+"call_2/deny", tok, `{"message": "not now"}`, nil)
	if rp.status != http.StatusOK || json.Unmarshal(rp.body, &res) != nil || res.Status != agentsql.StatusQueued {
		t.Fatalf("deny call_2: %d %s", rp.status, rp.body)
	}
	var list api.ToolCallList
	e.get(t, "/v1/tasks/"+task.ID.String()+"/tool-calls", tok, &list)
	if len(list.ToolCalls) != 2 || list.ToolCalls[1].Status != "denied" || *list.ToolCalls[1].Message != "not now" ||
		*list.ToolCalls[0].Resolver != "user:alice" {
		t.Errorf("tool calls = %+v", list.ToolCalls)
	}
}

func TestToolPolicyRefusedOnWrite(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "", "authenticated", project)
	for _, tt := range []struct{ name, method, path, body string }{
		{"AgentUnknownTool", "POST", "/v1/projects/" + project.String() + "/agents", `{"name": "a", "tool_policy": [{"tool": "rm_rf", "action": "deny"}]}`},
		{"AgentBadGlob", "POST", "/v1/projects/" + project.String() + "/agents", `{"name": "b", "tool_policy": [{"tool": "write_file", "match": "src/[", "action": "ask"}]}`},
		{"TaskBadAction", "POST", "/v1/projects/" + project.String() + "/tasks", `{"type": "build", "prompt": "x", "input": {"tool_policy": [{"tool": "write_file", "action": "later"}]}}`},
	} {
		if rp := e.call(t, tt.method, tt.path, tok, tt.body, nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeInvalidToolPolicy {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, rp.status, rp.body, api.CodeInvalidToolPolicy)
		}
	}
	rp := e.call(t, "POST", "/v1/projects/"+project.String()+"/agents", tok,
		`{"name": "careful", "tool_policy": [{"tool": "write_file", "match": "src/**", "action": "ask", "reason": "look first"}]}`, nil)
	var a agentsql.Agent
	if rp.status != http.StatusCreated || json.Unmarshal(rp.body, &a) != nil || string(a.ToolPolicy) == "[]" {
		t.Fatalf("create with a policy: %d %s", rp.status, rp.body)
	}
}
