package sql_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentworker/agentworker/handlers/tools"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// policyCases are tool policies both checks judge: the database's trigger
// and the worker's tools.ParseCallPolicy.
var policyCases = []struct {
	name, policy string
	valid        bool
}{
	{"Empty", `[]`, true},
	{"Rules", `[{"tool": "write_file", "match": "src/**", "action": "ask", "reason": "look first"},
		{"tool": "run_command", "match": "npm_test", "action": "deny"}, {"tool": "*", "match": "*.env", "action": "deny"},
		{"tool": "delete_file", "action": "ask"}]`, true},
	{"NotAList", `{"tool": "write_file", "action": "ask"}`, false},
	{"UnknownTool", `[{"tool": "rm_rf", "action": "deny"}]`, false},
	{"UnknownAction", `[{"tool": "write_file", "action": "maybe"}]`, false},
	{"NoAction", `[{"tool": "write_file"}]`, false},
	{"UnknownField", `[{"tool": "write_file", "action": "ask", "when": "always"}]`, false},
	{"UnclosedClass", `[{"tool": "write_file", "match": "src/[ab", "action": "ask"}]`, false},
	{"TrailingEscape", `[{"tool": "read_file", "match": "src\\", "action": "ask"}]`, false},
	{"MatchOnFinish", `[{"tool": "finish", "match": "x", "action": "deny"}]`, false},
	{"NumberReason", `[{"tool": "write_file", "action": "ask", "reason": 3}]`, false},
}

// TestToolPolicyCheckedOnWrite: an agent's tool_policy and a task's
// input.tool_policy are checked by the database on every write, as the
// worker checks them, naming the rule.
func TestToolPolicyCheckedOnWrite(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	for _, c := range policyCases {
		t.Run(c.name, func(t *testing.T) {
			_, goErr := tools.ParseCallPolicy(json.RawMessage(c.policy))
			if (goErr == nil) != c.valid {
				t.Errorf("ParseCallPolicy: %v, want valid %v", goErr, c.valid)
			}
			_, agentErr := pool.Exec(t.Context(), `INSERT INTO agents (project_id, name, tool_policy) VALUES ($1, $2, $3)`,
				project, "agent-"+c.name, c.policy)
			_, taskErr := pool.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input) VALUES ($1, 'build', 'x', jsonb_build_object('tool_policy', $2::jsonb))`,
				project, c.policy)
			for what, err := range map[string]error{"agents.tool_policy": agentErr, "input.tool_policy": taskErr} {
				if c.valid {
					if err != nil {
						t.Errorf("%s %s: %v", what, c.policy, err)
					}
					continue
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "tool_policy_valid" {
					t.Errorf("%s %s: err = %v, want check_violation tool_policy_valid", what, c.policy, err)
				}
			}
		})
	}
	t.Run("SameToolsAsTheWorker", func(t *testing.T) {
		for _, name := range tools.PolicyToolNames() {
			if _, err := pool.Exec(t.Context(), `SELECT agentworker_check_tool_policy(jsonb_build_array(jsonb_build_object('tool', $1::text, 'action', 'ask')), 'p')`, name); err != nil {
				t.Errorf("tool %s: %v", name, err)
			}
		}
	})
	t.Run("UpdateToo", func(t *testing.T) {
		var id uuid.UUID
		if err := pool.QueryRow(t.Context(), `INSERT INTO agents (project_id, name) VALUES ($1, 'updated') RETURNING id`, project).Scan(&id); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(t.Context(), `UPDATE agents SET tool_policy = '[{"tool": "write_file", "action": "sometimes"}]' WHERE id = $1`, id)
		if err == nil || !strings.Contains(err.Error(), "tool_policy[0]: action") {
			t.Fatalf("update with a bad action: err = %v, want it to name rule 0's action", err)
		}
	})
}

// TestToolCallsAnsweredOneByOne: a task waits in awaiting_approval until
// every call that asked is answered; each answer is versioned, audited and
// an event, the last one queues the task and closes the inbox item.
func TestToolCallsAnsweredOneByOne(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusAwaitingApproval)
	if _, err := pool.Exec(t.Context(), `INSERT INTO tool_approvals (task_id, tool_call_id, project_id, tool_name, arguments)
		SELECT id, c, project_id, 'write_file', '{"path": "a.txt"}' FROM ai_tasks, unnest(ARRAY['call_a', 'call_b']) AS c WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO inbox_items (project_id, task_id, kind, reason, title)
		SELECT project_id, id, 'await_user_input', 'tool_approval', 't' FROM ai_tasks WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	task, err := agentsql.GetTask(t.Context(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	v := task.Version

	stale := v - 1
	_, err = agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionApproveCall, agentsql.ControlOpts{ToolCallID: "call_a", ExpectedVersion: &stale})
	if !errors.Is(err, agentsql.ErrVersionConflict) {
		t.Fatalf("approve at a stale version: %v, want ErrVersionConflict", err)
	}
	_, err = agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionApproveCall, agentsql.ControlOpts{ToolCallID: "call_x"})
	if !errors.Is(err, agentsql.ErrTaskNotFound) || !strings.Contains(err.Error(), "tool call call_x") {
		t.Fatalf("approve an unknown call: %v, want not found", err)
	}

	res, err := agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionApproveCall, agentsql.ControlOpts{ToolCallID: "call_a", ExpectedVersion: &v, Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agentsql.StatusAwaitingApproval || res.Waiting != 1 || res.Version != v+1 {
		t.Fatalf("first answer: %+v, want still awaiting_approval, 1 waiting, version %d", res, v+1)
	}
	if _, err := agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionDenyCall, agentsql.ControlOpts{ToolCallID: "call_a"}); !errors.Is(err, agentsql.ErrIllegalTransition) {
		t.Fatalf("answer an answered call again: %v, want refused", err)
	}
	res, err = agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionDenyCall, agentsql.ControlOpts{ToolCallID: "call_b", Answer: "not that file", Actor: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agentsql.StatusQueued || res.Waiting != 0 {
		t.Fatalf("last answer: %+v, want queued", res)
	}
	approvals, err := agentsql.ToolApprovals(t.Context(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(approvals) != 2 || approvals[0].Status != "approved" || *approvals[0].Resolver != "alice" ||
		approvals[1].Status != "denied" || *approvals[1].Message != "not that file" {
		t.Fatalf("approvals = %+v", approvals)
	}
	var answered, open int
	if err := pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM agent_events WHERE task_id = $1 AND type = 'tool_approval_answered'),
		(SELECT count(*) FROM inbox_items WHERE task_id = $1 AND status = 'open')`, id).Scan(&answered, &open); err != nil {
		t.Fatal(err)
	}
	if answered != 2 || open != 0 {
		t.Fatalf("%d tool_approval_answered events, %d open inbox items; want 2 and 0", answered, open)
	}
	if a := lastAudit(t, pool, id); a.Metadata["action"] != "deny_call" || a.Metadata["toolCallId"] != "call_b" {
		t.Fatalf("audit = %+v", a)
	}
}
