package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/llm"
)

// TestServeInstantModel: the model process tells its URL, answers as the
// instant model (write_file, then finish after a tool result), and when
// its input closes tells the conversation it recorded and returns.
func TestServeInstantModel(t *testing.T) {
	t.Parallel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- ServeInstantModel(t.Context(), inR, outW)
		_ = outW.Close()
	}()
	out := bufio.NewReader(outR)
	url, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	client, err := llm.New(llm.Config{BaseURL: strings.TrimSpace(url), Model: "bench-instant", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	messages := []llm.Message{{Role: llm.RoleUser, Content: "build"}}
	for _, want := range []string{"write_file", "finish"} {
		resp, err := client.Complete(t.Context(), llm.Request{Messages: messages})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != want {
			t.Fatalf("the model answered %+v, want a call of %s", resp.Message, want)
		}
		messages = append(messages, resp.Message, llm.Message{Role: llm.RoleTool, ToolCallID: resp.Message.ToolCalls[0].ID, Content: `{"success":true}`})
	}
	_ = inW.Close()
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var recorded []llm.Message
	if err := json.Unmarshal([]byte(line), &recorded); err != nil {
		t.Fatalf("conversation %q: %v", line, err)
	}
	if len(recorded) != 3 || recorded[2].Role != llm.RoleTool {
		t.Errorf("recorded %d messages (%+v), want the 3 the second call was sent", len(recorded), recorded)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
