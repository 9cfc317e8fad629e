package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newClient returns a client for srv, changed by edit when not nil.
func newClient(t *testing.T, srv *llmtest.Server, edit func(*llm.Config)) *llm.Client {
	t.Helper()
	cfg := srv.Config()
	if edit != nil {
		edit(&cfg)
	}
	client, err := llm.New(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return client
}

// modes runs a test once without and once with streaming; the request
// passed to fn streams when its OnDelta is set.
var modes = []struct {
	name   string
	stream bool
}{
	{name: "Complete", stream: false},
	{name: "Stream", stream: true},
}

func userRequest(prompt string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: prompt}}}
}

func TestCompleteAnswers(t *testing.T) {
	t.Parallel()

	usage := &llm.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}
	tests := []struct {
		name       string
		reply      scripted.Reply
		wantMsg    llm.Message
		wantFinish string
	}{
		{
			name:       "PlainContent",
			reply:      scripted.Reply{Content: "Hello there, how can I help you today?", Usage: usage},
			wantMsg:    llm.Message{Role: llm.RoleAssistant, Content: "Hello there, how can I help you today?"},
			wantFinish: "stop",
		},
		{
			name: "ToolCall",
			reply: scripted.Reply{Usage: usage, ToolCalls: []llm.ToolCall{
				{ID: "call_abc", Name: "write_file", Arguments: `{"path":"hello.txt","content":"hi\n"}`},
			}},
			wantMsg: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_abc", Name: "write_file", Arguments: `{"path":"hello.txt","content":"hi\n"}`},
			}},
			wantFinish: "tool_calls",
		},
		{
			name: "ParallelToolCalls",
			reply: scripted.Reply{Usage: usage, Content: "Reading both.", ToolCalls: []llm.ToolCall{
				{Name: "read_file", Arguments: `{"path":"a.go"}`},
				{Name: "read_file", Arguments: `{"path":"b/c/d.go","unicode":"héllo wörld ✓"}`},
			}},
			wantMsg: llm.Message{Role: llm.RoleAssistant, Content: "Reading both.", ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.go"}`},
				{ID: "call_2", Name: "read_file", Arguments: `{"path":"b/c/d.go","unicode":"héllo wörld ✓"}`},
			}},
			wantFinish: "tool_calls",
		},
		{
			name: "MalformedArguments",
			reply: scripted.Reply{Usage: usage, ToolCalls: []llm.ToolCall{
				{ID: "call_bad", Name: "write_file", Arguments: `{"path": "x.txt", "content": `},
			}},
			wantMsg: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_bad", Name: "write_file", Arguments: `{"path": "x.txt", "content": `},
			}},
			wantFinish: "tool_calls",
		},
	}
	for _, tt := range tests {
		for _, mode := range modes {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				srv := llmtest.New(t, tt.reply)
				client := newClient(t, srv, nil)

				req := userRequest("hi")
				var deltas []string
				if mode.stream {
					req.OnDelta = func(d string) { deltas = append(deltas, d) }
				}
				resp, err := client.Complete(t.Context(), req)
				if err != nil {
					t.Fatalf("complete: %v", err)
				}
				if !reflect.DeepEqual(resp.Message, tt.wantMsg) {
					t.Errorf("message = %+v, want %+v", resp.Message, tt.wantMsg)
				}
				if resp.FinishReason != tt.wantFinish {
					t.Errorf("finish reason = %q, want %q", resp.FinishReason, tt.wantFinish)
				}
				if resp.Usage != *usage {
					t.Errorf("usage = %+v, want %+v", resp.Usage, *usage)
				}
				if resp.Model != llmtest.Model {
					t.Errorf("model = %q, want %q", resp.Model, llmtest.Model)
				}
				if resp.ToolChoiceFallback {
					t.Error("tool choice fallback is set without a fallback")
				}
				if got := strings.Join(deltas, ""); mode.stream && got != tt.wantMsg.Content {
					t.Errorf("deltas concatenate to %q, want %q", got, tt.wantMsg.Content)
				}

				reqs := srv.Requests()
				if len(reqs) != 1 {
					t.Fatalf("server saw %d requests, want 1", len(reqs))
				}
				if reqs[0].Stream != mode.stream || reqs[0].StreamOptions.IncludeUsage != mode.stream {
					t.Errorf("stream = %t, include_usage = %t, want both %t",
						reqs[0].Stream, reqs[0].StreamOptions.IncludeUsage, mode.stream)
				}
			})
		}
	}
}

func TestCompleteStreamsDeltasInOrder(t *testing.T) {
	t.Parallel()

	const content = "The quick brown fox jumps over the lazy dog. Ünïcödé too ✓."
	srv := llmtest.New(t, llmtest.Text(content))
	client := newClient(t, srv, nil)

	var deltas []string
	req := userRequest("tell me")
	req.OnDelta = func(d string) { deltas = append(deltas, d) }
	resp, err := client.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	if len(deltas) < 2 {
		t.Fatalf("got %d deltas, want several", len(deltas))
	}
	if got := strings.Join(deltas, ""); got != content {
		t.Errorf("deltas concatenate to %q, want %q", got, content)
	}
	if resp.Message.Content != content {
		t.Errorf("content = %q, want %q", resp.Message.Content, content)
	}
	// Without an explicit usage the server estimates one; it must arrive.
	if resp.Usage.TotalTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage = %+v, want the estimated usage", resp.Usage)
	}
}

func TestCompleteSendsConversation(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t, llmtest.Text("ok"))
	client := newClient(t, srv, func(c *llm.Config) { c.APIKey = "" })

	req := representativeRequest()
	if _, err := client.Complete(t.Context(), req); err != nil {
		t.Fatalf("complete: %v", err)
	}
	got := srv.Requests()[0]
	if !reflect.DeepEqual(got.Messages, req.Messages) {
		t.Errorf("server decoded messages %+v, want %+v", got.Messages, req.Messages)
	}
	if got.ToolChoice != "required" || len(got.Tools) != 2 {
		t.Errorf("tool_choice = %q with %d tools, want required with 2", got.ToolChoice, len(got.Tools))
	}
	if auth := got.Header.Get("Authorization"); auth != "Bearer unused" {
		t.Errorf("authorization = %q, want the placeholder key", auth)
	}
}

func TestCompleteOmitsToolChoiceWithoutTools(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t, llmtest.Text("ok"))
	client := newClient(t, srv, nil)

	req := userRequest("hi")
	req.ToolChoice = llm.ToolChoiceRequired
	if _, err := client.Complete(t.Context(), req); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if got := srv.Requests()[0].ToolChoice; got != "" {
		t.Errorf("tool_choice = %q, want none without tools", got)
	}
}

// TestCallParametersKeptApart: one client's calls each send their own
// model, tool choice, streaming and response format, though the encoded
// parameters are kept from call to call.
func TestCallParametersKeptApart(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t, llmtest.Text("ok"), llmtest.Text("ok"), llmtest.Text("ok"), llmtest.Text("ok"),
		llmtest.Text("ok"), llmtest.Text("ok"), llmtest.Text("ok"))
	client := newClient(t, srv, nil)
	tools := representativeRequest().Tools
	schema := &llm.ResponseSchema{Name: "answer", Schema: map[string]any{"type": "object"}, Strict: true}
	calls := []struct {
		model, choice string
		tools         bool
		stream        bool
		schema        bool
	}{
		{"", "auto", true, false, false},
		{"", "required", true, false, false},
		{"other-model", "auto", true, false, false},
		{"", "auto", true, true, false},
		{"", "", false, false, false},
		{"", "", false, false, true},
		{"", "auto", true, false, false}, // the first again
	}
	for i, call := range calls {
		req := userRequest("hi")
		req.Model = call.model
		if call.tools {
			req.Tools, req.ToolChoice = tools, llm.ToolChoice(call.choice)
		}
		if call.stream {
			req.OnDelta = func(string) {}
		}
		if call.schema {
			req.ResponseSchema = schema
		}
		if _, err := client.Complete(t.Context(), req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got := srv.Requests()[i]
		wantModel := call.model
		if wantModel == "" {
			wantModel = srv.Config().Model
		}
		var body struct {
			ResponseFormat json.RawMessage `json:"response_format"`
		}
		if err := json.Unmarshal(got.Body, &body); err != nil {
			t.Fatalf("call %d: decode body: %v", i, err)
		}
		if got.Model != wantModel || got.ToolChoice != call.choice || got.Stream != call.stream ||
			got.StreamOptions.IncludeUsage != call.stream || (body.ResponseFormat != nil) != call.schema {
			t.Errorf("call %d sent model %q, tool_choice %q, stream %v (usage %v), response_format %s; want %+v",
				i, got.Model, got.ToolChoice, got.Stream, got.StreamOptions.IncludeUsage, body.ResponseFormat, call)
		}
	}
}

// representativeRequest has every kind of message, tools and tool_choice.
func representativeRequest() llm.Request {
	return llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are a coding agent."},
			{Role: llm.RoleUser, Content: "create hello.txt saying hi"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "write_file", Arguments: `{"path":"hello.txt","content":"hi\n"}`},
				{ID: "call_2", Name: "list_files", Arguments: `{"path":""}`},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Content: "wrote 3 bytes"},
			{Role: llm.RoleTool, ToolCallID: "call_2", Content: "hello.txt"},
			{Role: llm.RoleAssistant, Content: "Done."},
			{Role: llm.RoleUser, Content: "thanks <3 & bye"},
		},
		Tools: []llm.Tool{
			{
				Name:        "write_file",
				Description: "Write a file in the workspace.",
				Parameters: map[string]any{
					"type": "object",
					"properties": map[string]any{
						"path":    map[string]any{"type": "string"},
						"content": map[string]any{"type": "string"},
					},
					"required": []string{"path", "content"},
				},
			},
			{Name: "finish", Parameters: map[string]any{"type": "object"}},
		},
		ToolChoice: llm.ToolChoiceRequired,
	}
}

// encodeTools returns ts encoded once, as a registry offers them.
func encodeTools(t *testing.T, ts []llm.Tool) []llm.Tool {
	t.Helper()
	out := make([]llm.Tool, len(ts))
	for i, tool := range ts {
		var err error
		if out[i], err = tool.Encode(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestRequestBodyGolden: tools encoded ahead (Tool.Encode) send the same
// body as tools encoded with the request.
func TestRequestBodyGolden(t *testing.T) {
	t.Parallel()

	for _, mode := range modes {
		for _, encoded := range []bool{false, true} {
			name := mode.name
			if encoded {
				name += "EncodedTools"
			}
			t.Run(name, func(t *testing.T) { requestBodyGolden(t, mode.name, mode.stream, encoded) })
		}
	}
}

func requestBodyGolden(t *testing.T, mode string, stream, encoded bool) {
	t.Parallel()
	srv := llmtest.New(t, llmtest.Text("ok"))
	client := newClient(t, srv, nil)

	req := representativeRequest()
	if encoded {
		req.Tools = encodeTools(t, req.Tools)
	}
	if stream {
		req.OnDelta = func(string) {}
	}
	if _, err := client.Complete(t.Context(), req); err != nil {
		t.Fatalf("complete: %v", err)
	}
	var body bytes.Buffer
	if err := json.Indent(&body, srv.Requests()[0].Body, "", "  "); err != nil {
		t.Fatalf("indent request body: %v", err)
	}
	body.WriteByte('\n')

	golden := filepath.Join("testdata", "request_"+strings.ToLower(mode)+".golden")
	if *update && !encoded { // both forms are held to one file
		if err := os.WriteFile(golden, body.Bytes(), 0o644); err != nil {
			t.Fatalf("update golden file: %v", err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(body.Bytes(), want) {
		t.Errorf("request body differs from %s (run with -update to accept):\n%s", golden, body.Bytes())
	}
}

func TestCompleteRetries(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name          string
		replies       []scripted.Reply
		maxRetries    int
		wantRequests  int
		wantStatus    int // 0: success
		wantTransient bool
	}{
		{
			name:         "RateLimitedThenSuccess",
			replies:      []scripted.Reply{llmtest.Error(http.StatusTooManyRequests, "0"), llmtest.Text("ok")},
			maxRetries:   3,
			wantRequests: 2,
		},
		{
			name:         "ServerErrorThenSuccess",
			replies:      []scripted.Reply{llmtest.Error(http.StatusBadGateway, "0"), llmtest.Text("ok")},
			maxRetries:   3,
			wantRequests: 2,
		},
		{
			name: "PersistentServerError",
			replies: []scripted.Reply{
				llmtest.Error(http.StatusInternalServerError, "0"),
				llmtest.Error(http.StatusInternalServerError, "0"),
				llmtest.Error(http.StatusInternalServerError, "0"),
				llmtest.Error(http.StatusInternalServerError, "0"),
				llmtest.Text("never reached"),
			},
			maxRetries:    2,
			wantRequests:  3,
			wantStatus:    http.StatusInternalServerError,
			wantTransient: true,
		},
		{
			// Refusals are waited out, not retried: they spend none of
			// MaxRetries.
			name: "RateLimitsSpendNoRetries",
			replies: []scripted.Reply{
				llmtest.Error(http.StatusTooManyRequests, "0"),
				llmtest.Error(http.StatusTooManyRequests, "0"),
				llmtest.Error(http.StatusServiceUnavailable, "0"),
				llmtest.Error(http.StatusTooManyRequests, "0"),
				llmtest.Text("ok"),
			},
			maxRetries:   -1,
			wantRequests: 5,
		},
		{
			name:         "BadRequestIsNotRetried",
			replies:      []scripted.Reply{llmtest.Error(http.StatusBadRequest, ""), llmtest.Text("never reached")},
			maxRetries:   3,
			wantRequests: 1,
			wantStatus:   http.StatusBadRequest,
		},
		{
			name:         "UnauthorizedIsNotRetried",
			replies:      []scripted.Reply{llmtest.Error(http.StatusUnauthorized, ""), llmtest.Text("never reached")},
			maxRetries:   3,
			wantRequests: 1,
			wantStatus:   http.StatusUnauthorized,
		},
		{
			name: "RetriesDisabled",
			replies: []scripted.Reply{
				llmtest.Error(http.StatusServiceUnavailable, ""), llmtest.Text("never reached"),
			},
			maxRetries:    -1,
			wantRequests:  1,
			wantStatus:    http.StatusServiceUnavailable,
			wantTransient: true,
		},
	}
	for _, tt := range tests {
		for _, mode := range modes {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				srv := llmtest.New(t, tt.replies...)
				client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries = tt.maxRetries })

				req := userRequest("hi")
				if mode.stream {
					req.OnDelta = func(string) {}
				}
				resp, err := client.Complete(t.Context(), req)
				if got := len(srv.Requests()); got != tt.wantRequests {
					t.Errorf("server saw %d requests, want %d", got, tt.wantRequests)
				}
				if tt.wantStatus == 0 {
					if err != nil {
						t.Fatalf("complete: %v", err)
					}
					if resp.Message.Content != "ok" {
						t.Errorf("content = %q, want ok", resp.Message.Content)
					}
					return
				}
				var apiErr *llm.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("error = %v (%T), want an *llm.APIError", err, err)
				}
				if apiErr.StatusCode != tt.wantStatus || apiErr.Transient != tt.wantTransient {
					t.Errorf("status = %d, transient = %t; want %d, %t",
						apiErr.StatusCode, apiErr.Transient, tt.wantStatus, tt.wantTransient)
				}
				if got := llm.IsTransient(err); got != tt.wantTransient {
					t.Errorf("IsTransient = %t, want %t", got, tt.wantTransient)
				}
			})
		}
	}
}

func TestCompleteRequiredToolChoiceFallback(t *testing.T) {
	t.Parallel()

	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewWith(t,
				scripted.Queue(llmtest.Call("finish", map[string]string{"summary": "a"}), llmtest.Text("b")),
				llmtest.RejectRequiredToolChoice())
			var logs bytes.Buffer
			client := newClient(t, srv, func(c *llm.Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})

			req := representativeRequest()
			if mode.stream {
				req.OnDelta = func(string) {}
			}
			first, err := client.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("first complete: %v", err)
			}
			if !first.ToolChoiceFallback {
				t.Error("first response: tool choice fallback is not set")
			}
			if len(first.Message.ToolCalls) != 1 || first.Message.ToolCalls[0].Name != "finish" {
				t.Errorf("first response tool calls = %+v, want one finish call", first.Message.ToolCalls)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "tool_choice required") {
				t.Errorf("log = %q, want a warning about tool_choice required", logs.String())
			}

			second, err := client.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("second complete: %v", err)
			}
			if !second.ToolChoiceFallback || second.Message.Content != "b" {
				t.Errorf("second response = %+v, want content b with the fallback set", second)
			}

			var choices []string
			for _, r := range srv.Requests() {
				choices = append(choices, r.ToolChoice)
			}
			if want := []string{"required", "auto", "auto"}; !reflect.DeepEqual(choices, want) {
				t.Errorf("tool choices sent = %q, want %q", choices, want)
			}
		})
	}
}

func TestCompleteFallbackNotRememberedWhenAutoAlsoRejected(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t,
		llmtest.Error(http.StatusBadRequest, ""),
		llmtest.Error(http.StatusBadRequest, ""),
		llmtest.Text("ok"),
	)
	client := newClient(t, srv, nil)

	req := representativeRequest()
	_, err := client.Complete(t.Context(), req)
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Fatalf("first complete error = %v, want a 400 api error", err)
	}
	resp, err := client.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("second complete: %v", err)
	}
	if resp.ToolChoiceFallback {
		t.Error("second response: fallback set although required was never proven unsupported")
	}
	if got := srv.Requests()[2].ToolChoice; got != "required" {
		t.Errorf("third request tool_choice = %q, want required", got)
	}
}

func TestErrorsNeverContainAPIKey(t *testing.T) {
	t.Parallel()

	const key = "sk-test-very-secret-key-123"
	tests := []struct {
		name   string
		status int
	}{
		{name: "Unauthorized", status: http.StatusUnauthorized},
		{name: "BadRequest", status: http.StatusBadRequest},
		{name: "ServerError", status: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The endpoint echoes the Authorization header in its message.
			srv := llmtest.NewWith(t, scripted.Func(func(req *scripted.Request) scripted.Reply {
				return scripted.Reply{
					Status:       tt.status,
					RetryAfter:   "0",
					ErrorMessage: "bad credentials: " + req.Header.Get("Authorization"),
				}
			}))
			client := newClient(t, srv, func(c *llm.Config) { c.APIKey = key })

			_, err := client.Complete(t.Context(), userRequest("hi"))
			if err == nil {
				t.Fatal("complete succeeded, want an error")
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("error %q contains the API key", err)
			}
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error = %v, want an *llm.APIError", err)
			}
			if !strings.Contains(apiErr.Message, "bad credentials: Bearer [redacted]") {
				t.Errorf("message = %q, want the redacted endpoint message", apiErr.Message)
			}
		})
	}
}

func TestCompleteCancel(t *testing.T) {
	t.Parallel()

	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{})
			srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply {
				close(arrived)
				return scripted.Reply{Content: "too late", Delay: time.Hour}
			}))
			client := newClient(t, srv, nil)

			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				<-arrived
				cancel()
			}()
			req := userRequest("hi")
			if mode.stream {
				req.OnDelta = func(string) {}
			}
			_, err := client.Complete(ctx, req)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v, want context.Canceled", err)
			}
			if llm.IsTransient(err) {
				t.Error("a cancelled call is reported transient")
			}
		})
	}
}

func TestCompleteTimeout(t *testing.T) {
	t.Parallel()

	srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		return scripted.Reply{Content: "too late", Delay: time.Hour}
	}))
	client := newClient(t, srv, func(c *llm.Config) {
		c.Timeout = 50 * time.Millisecond
		c.MaxRetries = -1
	})

	_, err := client.Complete(t.Context(), userRequest("hi"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want context.DeadlineExceeded", err)
	}
	if !llm.IsTransient(err) {
		t.Error("a timed out call is not reported transient")
	}
}

func TestCompleteTruncatedStream(t *testing.T) {
	t.Parallel()

	// The stream stops after the role chunk, without finish_reason or [DONE].
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",`+
			`"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
	}))
	t.Cleanup(srv.Close)
	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}

	req := userRequest("hi")
	req.OnDelta = func(string) {}
	_, err = client.Complete(t.Context(), req)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error = %v, want io.ErrUnexpectedEOF", err)
	}
	if !llm.IsTransient(err) {
		t.Error("a truncated stream is not reported transient")
	}
}

func TestCompleteStreamErrorEvent(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"error":{"message":"overloaded","type":"server_error","code":null}}`+"\n\n")
	}))
	t.Cleanup(srv.Close)
	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}

	req := userRequest("hi")
	req.OnDelta = func(string) {}
	_, err = client.Complete(t.Context(), req)
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error = %v, want an *llm.APIError", err)
	}
	want := llm.APIError{Type: "server_error", Message: "overloaded", Transient: true}
	if *apiErr != want {
		t.Errorf("api error = %+v, want %+v", *apiErr, want)
	}
}

func TestCompleteRejectsUnknownRole(t *testing.T) {
	t.Parallel()

	srv := llmtest.New(t)
	client := newClient(t, srv, nil)

	_, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: "narrator", Content: "x"}}})
	if err == nil || !strings.Contains(err.Error(), `unknown role "narrator"`) {
		t.Fatalf("error = %v, want an unknown role error", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		cfg     llm.Config
		wantErr bool
	}{
		{name: "Defaults", cfg: llm.Config{Model: "gpt-test"}},
		{name: "LocalEndpointWithoutKey", cfg: llm.Config{Model: "llama", BaseURL: "http://localhost:11434/v1"}},
		{name: "MissingModel", cfg: llm.Config{BaseURL: "http://localhost:11434/v1"}, wantErr: true},
		{name: "RelativeBaseURL", cfg: llm.Config{Model: "m", BaseURL: "localhost/v1"}, wantErr: true},
		{name: "UnparsableBaseURL", cfg: llm.Config{Model: "m", BaseURL: "http://[::1"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client, err := llm.New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %t", err, tt.wantErr)
			}
			if err == nil && client.Model() != tt.cfg.Model {
				t.Errorf("model = %q, want %q", client.Model(), tt.cfg.Model)
			}
		})
	}
}

// TestConnectionsReused: calls made many at once, round after round, reuse
// their connections. With http.DefaultClient (two idle connections kept)
// every round opened all but two of its connections again — over TLS to a
// hosted model, a handshake per call.
func TestConnectionsReused(t *testing.T) {
	t.Parallel()
	const concurrent, rounds = 20, 5
	srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }))
	cfg := srv.Config()
	cfg.HTTPClient = nil // the client's own
	client, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		start := make(chan struct{})
		for range concurrent {
			wg.Go(func() {
				<-start
				_, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, OnDelta: func(string) {}})
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d connections for %d rounds of %d calls", srv.Connections(), rounds, concurrent)
	// One per call in flight; a connection still being handed back when
	// the next round starts may add a few. Without reuse: ~rounds×concurrent.
	if got := srv.Connections(); got >= 2*concurrent {
		t.Errorf("%d rounds of %d calls at once opened %d connections; want under %d (about one per call in flight)", rounds, concurrent, got, 2*concurrent)
	}
}

// TestCallsSendTheAPIKey: streamed or not, a call carries the key as a
// bearer token (and the placeholder when there is none).
func TestCallsSendTheAPIKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		key      string
		streamed bool
		want     string
	}{
		{"Streamed", "sk-test", true, "Bearer sk-test"},
		{"NotStreamed", "sk-test", false, "Bearer sk-test"},
		{"StreamedWithoutKey", "", true, "Bearer unused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.New(t, llmtest.Text("ok"))
			client := newClient(t, srv, func(c *llm.Config) { c.APIKey = tt.key })
			req := userRequest("hi")
			if tt.streamed {
				req.OnDelta = func(string) {}
			}
			if _, err := client.Complete(t.Context(), req); err != nil {
				t.Fatalf("complete: %v", err)
			}
			got := srv.Requests()[0]
			if auth := got.Header.Get("Authorization"); auth != tt.want || got.Stream != tt.streamed {
				t.Errorf("authorization %q, streamed %v; want %q, %v", auth, got.Stream, tt.want, tt.streamed)
			}
		})
	}
}
