package worker_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestNULBytesAndBinaryFiles: a PNG and a text file holding a NUL byte in
// the project, and a model answer holding one, do not fail the task nor
// lose its events: binary files are reported by size and type, never as
// their bytes, and text is made safe for jsonb before it is stored.
func TestNULBytesAndBinaryFiles(t *testing.T) {
	t.Parallel()
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Call("read_file", map[string]string{"path": "logo.png"}),
		llmtest.Call("read_file", map[string]string{"path": "data.txt"}),
		llmtest.Text("the data file holds a NUL: \x00 here"),
	)})
	projectID := uuid.New()
	for p, c := range map[string][]byte{"logo.png": png, "data.txt": []byte("key=value\x00rest\n")} {
		if _, err := h.store.Write(t.Context(), projectID.String(), p, c); err != nil {
			t.Fatal(err)
		}
	}
	id := h.insertTask(t, projectID, "chat", "what is in logo.png and data.txt?")
	all, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	checkSeqs(t, all, 1)
	var res struct{ Summary string }
	if err := json.Unmarshal(task.Result, &res); err != nil || !strings.Contains(res.Summary, "NUL: \uFFFD here") {
		t.Errorf("summary = %q, %v: want the NUL replaced", res.Summary, err)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model calls = %d, want 3", len(reqs))
	}
	for i, want := range map[int]string{1: "image/png", 2: "application/octet-stream"} {
		var tool llm.Message
		for _, m := range reqs[i].Messages {
			if m.Role == llm.RoleTool {
				tool = m
			}
		}
		if !strings.Contains(tool.Content, `"binary":true`) || !strings.Contains(tool.Content, want) || strings.Contains(tool.Content, "IHDR") {
			t.Errorf("read_file result %d = %s: want it reported as binary (%s), without its bytes", i, tool.Content, want)
		}
	}
	var tools int
	for _, e := range all {
		if e.Type == events.TypeToolCall {
			tools++
		}
	}
	if tools != 2 {
		t.Errorf("tool_call events = %d, want 2", tools)
	}
}
