package handlers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
)

// TestDecideStrictestAndControl: the strictest of the task's policies
// holds, the control tools are never decided, an approved call runs, and
// a loop that cannot wait refuses what would ask.
func TestDecideStrictestAndControl(t *testing.T) {
	t.Parallel()
	parse := func(s string) tools.CallPolicy {
		t.Helper()
		p, err := tools.ParseCallPolicy(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	agent := parse(`[{"tool": "write_file", "action": "allow"}, {"tool": "*", "action": "ask", "reason": "look"}]`)
	task := parse(`[{"tool": "write_file", "match": "src/**", "action": "deny", "reason": "not src"}]`)
	write := func(path string) llm.ToolCall {
		return llm.ToolCall{ID: "call_" + path, Name: "write_file", Arguments: `{"path": "` + path + `", "content": "x"}`}
	}
	l := &loop{policies: []tools.CallPolicy{task, agent}}
	cases := []struct {
		name string
		call llm.ToolCall
		want string
	}{
		{"TaskNarrowsAgentsAllow", write("src/a.go"), tools.PolicyDeny},
		{"AgentsAllowWhereTheTaskIsSilent", write("docs/a.md"), tools.PolicyAllow},
		{"AgentAsksForTheRest", llm.ToolCall{ID: "c1", Name: "delete_file", Arguments: `{"path": "a"}`}, tools.PolicyAsk},
		{"FinishIsNeverDecided", llm.ToolCall{ID: "c2", Name: "finish", Arguments: `{"summary": "done"}`}, tools.PolicyAllow},
		{"RequestInputIsNeverDecided", llm.ToolCall{ID: "c3", Name: "request_input", Arguments: `{"question": "?"}`}, tools.PolicyAllow},
	}
	for _, c := range cases {
		if got := l.decide(c.call).Action; got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	del := llm.ToolCall{ID: "c1", Name: "delete_file", Arguments: `{"path": "a"}`}
	l.approved = map[string]bool{"c1": true}
	if got := l.decide(del).Action; got != tools.PolicyAllow {
		t.Errorf("an approved call: %s, want allow", got)
	}
	l.approved = nil
	l.noAsk = "cannot wait"
	if d := l.decide(del); d.Action != tools.PolicyDeny || !strings.Contains(d.Reason, "cannot wait") || !strings.Contains(d.Reason, "look") {
		t.Errorf("ask where the loop cannot wait: %+v, want a deny naming both reasons", d)
	}
	if res, ok := l.denied(del); !ok || res.Success || !strings.Contains(res.Output, "cannot wait") {
		t.Errorf("denied result = %+v, %v", res, ok)
	}
}
