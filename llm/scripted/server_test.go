package scripted_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixedClock is the creation time of every completion in these tests.
func fixedClock() time.Time { return time.Unix(1700000000, 0) }

// setup serves s on an httptest server closed when the test ends.
func setup(t *testing.T, s *scripted.Server) *httptest.Server {
	t.Helper()
	if s.Clock == nil {
		s.Clock = fixedClock
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to path and returns the response with its body read.
func post(t *testing.T, srv *httptest.Server, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response of %s: %v", path, err)
	}
	return resp, data
}

const userBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func TestServerCompletion(t *testing.T) {
	t.Parallel()

	usage := &llm.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}
	tests := []struct {
		name  string
		path  string
		reply scripted.Reply
		want  string
	}{
		{
			name:  "Text",
			path:  "/v1/chat/completions",
			reply: scripted.Reply{Content: "hello", Usage: usage},
			want: `{"id":"chatcmpl-scripted-1","object":"chat.completion","created":1700000000,"model":"m",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"hello","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		},
		{
			name: "ToolCallsWithoutPrefix",
			path: "/chat/completions",
			reply: scripted.Reply{Usage: usage, ToolCalls: []llm.ToolCall{
				{Name: "a", Arguments: `{}`},
				{ID: "mine", Name: "b", Arguments: `{"x":`},
			}},
			want: `{"id":"chatcmpl-scripted-1","object":"chat.completion","created":1700000000,"model":"m",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[` +
				`{"id":"call_1","type":"function","function":{"name":"a","arguments":"{}"}},` +
				`{"id":"mine","type":"function","function":{"name":"b","arguments":"{\"x\":"}}]},` +
				`"logprobs":null,"finish_reason":"tool_calls"}],` +
				`"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		},
		{
			name:  "EstimatedUsage",
			path:  "/v1/chat/completions",
			reply: scripted.Reply{Content: "12345678"},
			want: `{"id":"chatcmpl-scripted-1","object":"chat.completion","created":1700000000,"model":"m",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"12345678","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, &scripted.Server{Responder: scripted.Queue(tt.reply)})

			resp, body := post(t, srv, tt.path, userBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type = %q, want application/json", ct)
			}
			if string(body) != tt.want {
				t.Errorf("body =\n%s\nwant\n%s", body, tt.want)
			}
		})
	}
}

// sseData returns the data of each server-sent event in body.
func sseData(t *testing.T, body []byte) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		events = append(events, data)
	}
	return events
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *llm.Usage `json:"usage"`
}

func TestServerStream(t *testing.T) {
	t.Parallel()

	const content = "Streaming content, in pieces ✓"
	calls := []llm.ToolCall{
		{Name: "write_file", Arguments: `{"path":"hello.txt","content":"hi\n"}`},
		{Name: "list_files", Arguments: `{"path":""}`},
	}
	usage := llm.Usage{PromptTokens: 5, CompletionTokens: 6, TotalTokens: 11}
	tests := []struct {
		name         string
		includeUsage bool
	}{
		{name: "WithUsage", includeUsage: true},
		{name: "WithoutUsage", includeUsage: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, &scripted.Server{Responder: scripted.Queue(
				scripted.Reply{Content: content, ToolCalls: calls, Usage: &usage},
			)})

			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if tt.includeUsage {
				body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			resp, data := post(t, srv, "/v1/chat/completions", body)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("content type = %q, want text/event-stream", ct)
			}
			events := sseData(t, data)
			if last := events[len(events)-1]; last != "[DONE]" {
				t.Fatalf("last event = %q, want [DONE]", last)
			}

			var (
				role          string
				contentDeltas []string
				gotCalls      []llm.ToolCall
				argFragments  = map[int]int{}
				finish        string
				gotUsage      *llm.Usage
			)
			for i, e := range events[:len(events)-1] {
				var c chunk
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Fatalf("decode event %d %q: %v", i, e, err)
				}
				if c.Object != "chat.completion.chunk" {
					t.Errorf("event %d object = %q", i, c.Object)
				}
				if c.Usage != nil {
					if len(c.Choices) != 0 {
						t.Errorf("usage chunk has %d choices, want none", len(c.Choices))
					}
					gotUsage = c.Usage
					continue
				}
				d := c.Choices[0].Delta
				if d.Role != "" {
					role = d.Role
				}
				if d.Content != nil && *d.Content != "" {
					contentDeltas = append(contentDeltas, *d.Content)
				}
				for _, tc := range d.ToolCalls {
					if tc.ID != "" {
						if tc.Index != len(gotCalls) || tc.Function.Name == "" || tc.Type != "function" {
							t.Errorf("tool call start %+v is not the next call with a name", tc)
						}
						gotCalls = append(gotCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name})
					}
					if tc.Function.Arguments != "" {
						gotCalls[tc.Index].Arguments += tc.Function.Arguments
						argFragments[tc.Index]++
					}
				}
				if fr := c.Choices[0].FinishReason; fr != nil {
					finish = *fr
				}
			}

			if role != "assistant" {
				t.Errorf("role = %q, want assistant", role)
			}
			if len(contentDeltas) < 2 || strings.Join(contentDeltas, "") != content {
				t.Errorf("content deltas = %q, want several joining to %q", contentDeltas, content)
			}
			wantCalls := []llm.ToolCall{
				{ID: "call_1", Name: calls[0].Name, Arguments: calls[0].Arguments},
				{ID: "call_2", Name: calls[1].Name, Arguments: calls[1].Arguments},
			}
			if !reflect.DeepEqual(gotCalls, wantCalls) {
				t.Errorf("tool calls = %+v, want %+v", gotCalls, wantCalls)
			}
			if argFragments[0] < 2 || argFragments[1] < 2 {
				t.Errorf("argument fragments per call = %v, want several each", argFragments)
			}
			if finish != "tool_calls" {
				t.Errorf("finish reason = %q, want tool_calls", finish)
			}
			switch {
			case tt.includeUsage && (gotUsage == nil || *gotUsage != usage):
				t.Errorf("usage = %v, want %+v", gotUsage, usage)
			case !tt.includeUsage && gotUsage != nil:
				t.Errorf("usage chunk sent without include_usage: %+v", gotUsage)
			}
		})
	}
}

func TestServerErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name           string
		server         *scripted.Server
		method         string
		path           string
		body           string
		wantStatus     int
		wantRetryAfter string
		wantType       string
		wantMessage    string
	}{
		{
			name:           "ScriptedRateLimit",
			server:         &scripted.Server{Responder: scripted.Queue(scripted.Reply{Status: 429, RetryAfter: "7"})},
			wantStatus:     429,
			wantRetryAfter: "7",
			wantType:       "rate_limit_error",
			wantMessage:    "Too Many Requests",
		},
		{
			name:        "ScriptedMessage",
			server:      &scripted.Server{Responder: scripted.Queue(scripted.Reply{Status: 503, ErrorMessage: "overloaded"})},
			wantStatus:  503,
			wantType:    "server_error",
			wantMessage: "overloaded",
		},
		{
			name:        "ScriptExhausted",
			server:      &scripted.Server{Responder: scripted.Queue()},
			wantStatus:  500,
			wantType:    "server_error",
			wantMessage: "script exhausted: no reply left for request 1",
		},
		{
			name:        "NoResponder",
			server:      &scripted.Server{},
			wantStatus:  500,
			wantType:    "server_error",
			wantMessage: "scripted server has no responder",
		},
		{
			name:   "RequiredToolChoiceRejected",
			server: &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "x"}), RejectRequiredToolChoice: true},
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"required",` +
				`"tools":[{"type":"function","function":{"name":"f"}}]}`,
			wantStatus:  400,
			wantType:    "invalid_request_error",
			wantMessage: `tool_choice "required" is not supported by this endpoint`,
		},
		{
			name:       "InvalidJSON",
			server:     &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "x"})},
			body:       `{"model":`,
			wantStatus: 400,
			wantType:   "invalid_request_error",
		},
		{
			name:       "UnknownPath",
			server:     &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "x"})},
			path:       "/v1/completions",
			wantStatus: 404,
			wantType:   "not_found_error",
		},
		{
			name:       "WrongMethod",
			server:     &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "x"})},
			method:     http.MethodGet,
			wantStatus: 405,
			wantType:   "invalid_request_error",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, tt.server)
			method, path, body := http.MethodPost, "/v1/chat/completions", userBody
			if tt.method != "" {
				method = tt.method
			}
			if tt.path != "" {
				path = tt.path
			}
			if tt.body != "" {
				body = tt.body
			}
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
			if err != nil {
				t.Fatalf("new request: %v", err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("do request: %v", err)
			}
			defer resp.Body.Close()

			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("decode error body: %v", err)
			}
			if e.Error.Type != tt.wantType {
				t.Errorf("error type = %q, want %q", e.Error.Type, tt.wantType)
			}
			if e.Error.Message == "" || (tt.wantMessage != "" && e.Error.Message != tt.wantMessage) {
				t.Errorf("error message = %q, want %q", e.Error.Message, tt.wantMessage)
			}
		})
	}
}

func TestServerRecordsRequests(t *testing.T) {
	t.Parallel()

	s := &scripted.Server{Responder: scripted.Queue(
		scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "a"}}},
		scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "b"}}},
	)}
	srv := setup(t, s)

	first := `{"model":"m","messages":[` +
		`{"role":"system","content":"sys"},` +
		`{"role":"user","content":[{"type":"text","text":"part one, "},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"part two"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"call_9","content":"result"}],` +
		`"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"}}}],` +
		`"tool_choice":{"type":"function","function":{"name":"f"}}}`
	second := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"again"}],"tool_choice":"auto"}`
	post(t, srv, "/v1/chat/completions", first)
	_, streamed := post(t, srv, "/v1/chat/completions", second)

	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("recorded %d requests, want 2", len(reqs))
	}
	wantMessages := []llm.Message{
		{Role: llm.RoleSystem, Content: "sys"},
		{Role: llm.RoleUser, Content: "part one, part two"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_9", Name: "f", Arguments: `{"a":1}`}}},
		{Role: llm.RoleTool, ToolCallID: "call_9", Content: "result"},
	}
	if !reflect.DeepEqual(reqs[0].Messages, wantMessages) {
		t.Errorf("messages = %+v, want %+v", reqs[0].Messages, wantMessages)
	}
	wantTools := []llm.Tool{{Name: "f", Description: "does f"}}
	if !reflect.DeepEqual(reqs[0].Tools, wantTools) {
		t.Errorf("tools = %+v, want %+v", reqs[0].Tools, wantTools)
	}
	params, err := reqs[0].ToolParameters("f")
	if want := map[string]any{"type": "object"}; err != nil || !reflect.DeepEqual(params, want) {
		t.Errorf("parameters of f = %v (%v), want %v", params, err, want)
	}
	if params, err := reqs[0].ToolParameters("g"); params != nil || err != nil {
		t.Errorf("parameters of a tool not offered = %v (%v), want nil", params, err)
	}
	if reqs[0].ToolChoice != "function" || reqs[0].ToolChoiceName != "f" {
		t.Errorf("tool choice = %q %q, want function f", reqs[0].ToolChoice, reqs[0].ToolChoiceName)
	}
	if string(reqs[0].Body) != first {
		t.Errorf("body = %s, want the raw request body", reqs[0].Body)
	}
	if reqs[0].Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v, want the request headers", reqs[0].Header)
	}
	if !reqs[1].Stream || !reqs[1].StreamOptions.IncludeUsage || reqs[1].ToolChoice != "auto" {
		t.Errorf("second request = %+v, want a streamed request with usage and tool_choice auto", reqs[1])
	}
	// Generated tool call ids keep counting across completions.
	if !bytes.Contains(streamed, []byte(`"id":"call_2"`)) {
		t.Errorf("second answer does not carry call_2:\n%s", streamed)
	}
}

func TestServerDelayEndsWithClient(t *testing.T) {
	t.Parallel()

	arrived := make(chan struct{})
	srv := setup(t, &scripted.Server{Responder: scripted.Func(func(*scripted.Request) scripted.Reply {
		close(arrived)
		return scripted.Reply{Content: "late", Delay: time.Hour}
	})})

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-arrived
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(userBody))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	resp, err := srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request succeeded, want it cancelled")
	}
	// srv.Close in the cleanup blocks until the handler has returned, and
	// goleak in TestMain reports a handler stuck in its delay.
}

func TestServerDelay(t *testing.T) {
	t.Parallel()

	const delay = 30 * time.Millisecond
	srv := setup(t, &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "x", Delay: delay})})
	start := time.Now()
	resp, _ := post(t, srv, "/v1/chat/completions", userBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	if elapsed := time.Since(start); elapsed < delay {
		t.Errorf("answered after %s, want at least %s", elapsed, delay)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(userBody))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tool_choice":{"type":"function"}}`))
	f.Add([]byte(`{"tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := &scripted.Server{Responder: scripted.Func(func(*scripted.Request) scripted.Reply {
			return scripted.Reply{Content: "ok"}
		})}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("status = %d, want 200 or 400", rec.Code)
		}
		if got := len(s.Requests()); got != 1 {
			t.Fatalf("recorded %d requests, want 1", got)
		}
	})
}

func TestDiscardRequests(t *testing.T) {
	t.Parallel()
	s := &scripted.Server{Responder: scripted.Queue(scripted.Reply{Content: "a"}), DiscardRequests: true}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if n := len(s.Requests()); n != 0 {
		t.Fatalf("kept %d requests", n)
	}
}

func TestListenLoopback(t *testing.T) {
	t.Parallel()
	l, err := scripted.ListenLoopback(scripted.Queue(scripted.Reply{Content: "hi"}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := llm.New(llm.Config{BaseURL: l.URL, Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}})
	if err != nil || resp.Message.Content != "hi" {
		t.Fatalf("Complete = %+v, %v", resp, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
