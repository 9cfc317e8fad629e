package llmtest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBuilders(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		reply scripted.Reply
		want  scripted.Reply
	}{
		{name: "Text", reply: llmtest.Text("hi"), want: scripted.Reply{Content: "hi"}},
		{
			name:  "CallMarshals",
			reply: llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a"}),
			want:  scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"a","path":"a.txt"}`}}},
		},
		{
			name:  "CallStringVerbatim",
			reply: llmtest.Call("write_file", `{"path": `),
			want:  scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path": `}}},
		},
		{
			name:  "CallRawMessageVerbatim",
			reply: llmtest.Call("finish", json.RawMessage(`{"summary":"x"}`)),
			want:  scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"x"}`}}},
		},
		{
			name:  "Calls",
			reply: llmtest.Calls(llmtest.Call("a", struct{}{}), llmtest.Call("b", []int{1})),
			want:  scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "a", Arguments: `{}`}, {Name: "b", Arguments: `[1]`}}},
		},
		{name: "Error", reply: llmtest.Error(429, "2"), want: scripted.Reply{Status: 429, RetryAfter: "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.reply, tt.want) {
				t.Errorf("reply = %+v, want %+v", tt.reply, tt.want)
			}
		})
	}
}

func TestServer(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t, llmtest.Calls(llmtest.Call("a", map[string]int{"n": 1}), llmtest.Call("b", "{}")), llmtest.Text("done"))
	if !strings.HasSuffix(srv.URL(), "/v1") {
		t.Errorf("URL = %q, want it to end in /v1", srv.URL())
	}
	cfg := srv.Config()
	cfg.MaxRetries = -1 // the exhausted script answers 500, worth no retry here
	client, err := llm.New(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}

	first, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}})
	if err != nil {
		t.Fatalf("first complete: %v", err)
	}
	wantCalls := []llm.ToolCall{{ID: "call_1", Name: "a", Arguments: `{"n":1}`}, {ID: "call_2", Name: "b", Arguments: `{}`}}
	if !reflect.DeepEqual(first.Message.ToolCalls, wantCalls) {
		t.Errorf("tool calls = %+v, want %+v", first.Message.ToolCalls, wantCalls)
	}
	second, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}})
	if err != nil || second.Message.Content != "done" {
		t.Fatalf("second complete = %+v, %v; want done", second, err)
	}
	_, err = client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}})
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "script exhausted") {
		t.Errorf("third complete error = %v, want script exhausted", err)
	}
	if got := len(srv.Requests()); got != 3 {
		t.Errorf("server recorded %d requests, want 3", got)
	}
}

func TestRejectRequiredToolChoice(t *testing.T) {
	t.Parallel()

	srv := llmtest.NewWith(t, scripted.Queue(llmtest.Text("ok")), llmtest.RejectRequiredToolChoice())
	if !srv.RejectRequiredToolChoice {
		t.Fatal("option not applied to the scripted server")
	}
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	resp, err := srv.Config().HTTPClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status = %d, want 400", resp.StatusCode)
	}
}
