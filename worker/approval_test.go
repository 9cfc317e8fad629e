package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestToolPolicyAskDenyApprove: a denied call is answered with its rule's
// reason and never runs; calls that ask are not run, the task waits in
// awaiting_approval holding no lease, with an approval row per call and
// an inbox item; answered one by one, the task goes on when the last is
// answered: the approved call runs once and its output, the denied one's
// message, join the conversation before the model's next call.
func TestToolPolicyAskDenyApprove(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Calls(
			llmtest.Call("write_file", map[string]string{"path": "secret/key.txt", "content": "k\n"}),
			llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a\n"}),
			llmtest.Call("write_file", map[string]string{"path": "b.txt", "content": "b\n"}),
			llmtest.Call("list_files", map[string]string{"path": "."}),
		),
		llmtest.Call("finish", map[string]string{"summary": "wrote a.txt"}),
	)})
	id, projectID := h.insertWithInput(t, "build", "write files", map[string]any{"tool_policy": []map[string]string{
		{"tool": "write_file", "match": "secret/**", "action": "deny", "reason": "no secrets here"},
		{"tool": "write_file", "action": "ask", "reason": "writes need a look"},
	}})
	h.waitStatus(t, id, agentsql.StatusAwaitingApproval)
	poll.Until(t, "the suspended job to complete", 10*time.Second, func() bool { return h.jobState(t, id) == "completed" })

	task, err := agentsql.GetTask(t.Context(), h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	var leased bool
	if err := h.pool.QueryRow(t.Context(), `SELECT lease_owner IS NOT NULL FROM ai_tasks WHERE id = $1`, id).Scan(&leased); err != nil || leased {
		t.Errorf("leased while awaiting approval: %v, %v", leased, err)
	}
	if got := h.runStatuses(t, id); got != "interrupted" {
		t.Errorf("runs = %s, want interrupted", got)
	}
	if items := h.openItems(t, id, "tool_approval"); len(items) != 1 {
		t.Errorf("open tool_approval items = %d, want 1", len(items))
	}
	approvals, err := agentsql.ToolApprovals(t.Context(), h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(approvals) != 2 || !strings.Contains(approvals[0].Arguments+approvals[1].Arguments, `"a.txt"`) ||
		!strings.Contains(approvals[0].Arguments+approvals[1].Arguments, `"b.txt"`) || approvals[0].Reason != "writes need a look" {
		t.Fatalf("approvals = %+v, want the a.txt and b.txt writes", approvals)
	}
	byPath := map[string]agentsql.ToolApproval{}
	for _, a := range approvals {
		if strings.Contains(a.Arguments, `"a.txt"`) {
			byPath["a"] = a
		} else {
			byPath["b"] = a
		}
	}
	for _, p := range []string{"a.txt", "b.txt", "secret/key.txt"} {
		if _, _, err := h.store.Read(t.Context(), projectID.String(), p); err == nil {
			t.Errorf("%s exists before any approval", p)
		}
	}

	v := task.Version
	res, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionApproveCall,
		agentsql.ControlOpts{ToolCallID: byPath["a"].ToolCallID, ExpectedVersion: &v, Actor: "alice"})
	if err != nil || res.Status != agentsql.StatusAwaitingApproval || res.Waiting != 1 {
		t.Fatalf("approve the first call: %+v, %v; want still awaiting approval", res, err)
	}
	if got := len(h.llm.Requests()); got != 1 {
		t.Fatalf("model calls after one answer = %d, want 1", got)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionDenyCall,
		agentsql.ControlOpts{ToolCallID: byPath["b"].ToolCallID, Answer: "b.txt is generated; leave it", Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	evs, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if content, _, err := h.store.Read(t.Context(), projectID.String(), "a.txt"); err != nil || string(content) != "a\n" {
		t.Errorf("a.txt = %q, %v; want the approved write", content, err)
	}
	for _, p := range []string{"b.txt", "secret/key.txt"} {
		if _, _, err := h.store.Read(t.Context(), projectID.String(), p); err == nil {
			t.Errorf("%s was written, but its call was denied", p)
		}
	}
	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model calls = %d, want 2", len(reqs))
	}
	results := map[string]string{}
	for _, m := range reqs[1].Messages {
		if m.Role == llm.RoleTool {
			results[m.ToolCallID] = m.Content
		}
	}
	if len(results) != 4 {
		t.Errorf("the model's second call has %d tool results, want one for each of the 4 calls: %v", len(results), results)
	}
	if r := results[byPath["a"].ToolCallID]; !strings.Contains(r, `"success":true`) {
		t.Errorf("approved call's result = %s", r)
	}
	if r := results[byPath["b"].ToolCallID]; !strings.Contains(r, "b.txt is generated; leave it") || !strings.Contains(r, `"success":false`) {
		t.Errorf("denied call's result = %s, want the person's message", r)
	}
	var deniedByRule bool
	for _, r := range results {
		deniedByRule = deniedByRule || strings.Contains(r, "no secrets here")
	}
	if !deniedByRule {
		t.Errorf("no result gives the deny rule's reason: %v", results)
	}
	approvals, _ = agentsql.ToolApprovals(t.Context(), h.pool, id)
	for _, a := range approvals {
		switch {
		case a.ToolCallID == byPath["a"].ToolCallID && (a.Status != "approved" || a.Output == nil || a.RanAt == nil):
			t.Errorf("approved call = %+v, want its output recorded", a)
		case a.ToolCallID == byPath["b"].ToolCallID && (a.Status != "denied" || a.Output != nil):
			t.Errorf("denied call = %+v", a)
		}
	}
	if got := h.runStatuses(t, id); got != "interrupted,succeeded" {
		t.Errorf("runs = %s", got)
	}
	var requested, answered int
	for _, e := range evs {
		switch e.Type {
		case events.TypeToolApprovalRequested:
			requested++
		case events.TypeToolApprovalAnswered:
			answered++
		}
	}
	if requested != 2 || answered != 2 {
		t.Errorf("events: %d requested, %d answered; want 2 and 2", requested, answered)
	}
	if items := h.openItems(t, id, "tool_approval"); len(items) != 0 {
		t.Errorf("open tool_approval items after the answers = %d", len(items))
	}
}
