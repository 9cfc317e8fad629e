package handlers_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
)

// TestFailedCallIsNotRepeated makes the same failing edit_file call four
// times, across a repair attempt: it runs once, every repeat is answered
// with the first error without running, and the repair message quotes the
// call and its error.
func TestFailedCallIsNotRepeated(t *testing.T) {
	t.Parallel()
	wrong := call("edit_file", m{"path": "src/greet.ts", "old_string": `return "hello"`, "new_string": "return 'hi'"})
	h := setup(t, []scripted.Reply{
		wrong, wrong, wrong,
		// The repair attempt starts with the same call once more.
		wrong,
		call("read_file", m{"path": "src/greet.ts"}),
		call("edit_file", m{"path": "src/greet.ts", "old_string": "return 'hello'", "new_string": "return 'hi'"}),
		call("finish", m{"summary": "greet says hi"}),
	}, handlers.Config{}, map[string]string{"src/greet.ts": "export function greet(): string {\n  return 'hello'\n}\n"})
	id := h.insert(t, "build", "make greet say hi", nil)
	evs, task := h.wait(t, id)
	result(t, task)
	var summaries []string
	for _, ev := range evs {
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := p.(*events.ToolCall); ok && tc.ToolName == "edit_file" && !tc.Success {
			summaries = append(summaries, firstLine(tc.ResultSummary))
		}
	}
	if len(summaries) != 4 || strings.HasPrefix(summaries[0], "not run") {
		t.Fatalf("failed edit_file calls: %q", summaries)
	}
	for _, s := range summaries[1:] {
		if !strings.HasPrefix(s, "not run: repeats a failed call: edit_file src/greet.ts: the text to replace was not found") {
			t.Errorf("repeat answered with %q", s)
		}
	}
	reqs := h.llm.Requests()
	// The answer to the second call carries the first error.
	answer := reqs[2].Messages[len(reqs[2].Messages)-1].Content
	var body map[string]any
	if err := json.Unmarshal([]byte(answer), &body); err != nil || !strings.Contains(body["error"].(string), "already failed at iteration 1") || body["earlierResult"] == nil {
		t.Errorf("repeat answer = %s", answer)
	}
	_, repairMsg := reqs[3].LastUserMessage()
	wantCall := `edit_file {"new_string":"return 'hi'","old_string":"return \"hello\"","path":"src/greet.ts"}`
	if !strings.Contains(repairMsg, wantCall) || !strings.Contains(repairMsg, "error: edit_file src/greet.ts: the text to replace was not found") {
		t.Errorf("repair message does not quote the failed call:\n%s", repairMsg)
	}
}
