package handlers_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

func TestLongConversationIsCondensedKeepingGoalAndFilesTouched(t *testing.T) {
	t.Parallel()
	big := func(name string) string {
		var b strings.Builder
		for i := range 300 {
			fmt.Fprintf(&b, "%s line %03d: some long log output that fills the model's window quickly\n", name, i)
		}
		return b.String()
	}
	files := map[string]string{"logs/a.txt": big("a"), "logs/b.txt": big("b"), "logs/c.txt": big("c")}
	const goal = "summarise the logs into src/summary.ts"
	h := setup(t, []scripted.Reply{
		call("read_file", m{"path": "logs/a.txt"}),
		call("read_file", m{"path": "logs/b.txt"}),
		call("write_file", m{"path": "src/summary.ts", "content": "export const lines = 900\n"}),
		call("read_file", m{"path": "logs/c.txt"}),
		call("list_files", m{"path": "logs"}),
		call("search_files", m{"query": "line 299"}),
		call("finish", m{"summary": "wrote src/summary.ts"}),
	}, handlers.Config{ContextTokens: 6000}, files)
	id := h.insert(t, "build", goal, nil)
	_, task := h.wait(t, id)
	result(t, task)

	reqs := h.llm.Requests()
	if len(reqs) != 7 {
		t.Fatalf("%d requests, want 7", len(reqs))
	}
	first, last := reqs[0], reqs[len(reqs)-1]
	// The system prompt and the goal are sent unchanged every time.
	if last.Messages[0].Content != first.Messages[0].Content || last.Messages[1].Role != llm.RoleUser || last.Messages[1].Content != goal {
		t.Errorf("the system prompt or the goal changed: %q", last.Messages[1].Content)
	}
	// The big outputs of a.txt and b.txt are condensed to their summaries;
	// the newest outputs are intact.
	outputs := map[string]string{} // tool call id → content
	for _, msg := range last.Messages {
		if msg.Role == llm.RoleTool {
			outputs[msg.ToolCallID] = msg.Content
		}
	}
	callIDs := map[string]string{} // path or tool → tool call id
	for _, msg := range last.Messages {
		for _, c := range msg.ToolCalls {
			key := c.Name
			if strings.Contains(c.Arguments, "logs/a.txt") || strings.Contains(c.Arguments, "logs/b.txt") || strings.Contains(c.Arguments, "logs/c.txt") {
				key = c.Arguments
			}
			callIDs[key] = c.ID
		}
	}
	for _, p := range []string{"logs/a.txt", "logs/b.txt"} {
		out := outputs[callIDs[`{"path":"`+p+`"}`]]
		if !strings.HasPrefix(out, `{"condensed":true`) || !strings.Contains(out, "read_file: read "+p) || strings.Contains(out, "line 200") {
			t.Errorf("output of read_file %s in the last request = %.200s", p, out)
		}
	}
	if out := outputs[callIDs["search_files"]]; !strings.Contains(out, "logs/c.txt") || strings.Contains(out, "condensed") {
		t.Errorf("newest output = %.200s", out)
	}
	// A note restates the files changed.
	notes := 0
	for _, msg := range last.Messages {
		if msg.Role == llm.RoleUser && strings.HasPrefix(msg.Content, "Context note:") {
			notes++
			if !strings.Contains(msg.Content, "Files changed so far: src/summary.ts.") {
				t.Errorf("note = %q", msg.Content)
			}
		}
	}
	if notes == 0 {
		t.Error("no context note in the last request")
	}
	// What was sent stays bounded: without condensation the last body would
	// carry all three logs.
	logs := len(files["logs/a.txt"]) * 3
	if n := len(last.Body); n >= logs {
		t.Errorf("last request body is %d bytes; the logs alone are %d", n, logs)
	}
	t.Logf("request bodies: first %d bytes, last %d bytes (logs %d bytes)", len(first.Body), len(last.Body), logs)
}
