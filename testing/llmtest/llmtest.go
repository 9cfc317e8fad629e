// Package llmtest starts scripted OpenAI-compatible servers for tests.
//
// [New] serves a queue of replies on an httptest server that is closed when
// the test ends; [Server.Config] points an [llm.Client] at it. The builders
// [Text], [Call], [Calls] and [Error] write the replies:
//
//	srv := llmtest.New(t,
//		llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a"}),
//		llmtest.Text("done"),
//	)
//	client, err := llm.New(srv.Config())
package llmtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

// Model is the model name [Server.Config] uses.
const Model = "llmtest-model"

// Server is a scripted Chat Completions server on a local port. The
// embedded scripted.Server gives access to the recorded requests.
type Server struct {
	*scripted.Server
	httpServer *httptest.Server
	conns      atomic.Int64
}

// Option configures a Server.
type Option func(*scripted.Server)

// RejectRequiredToolChoice makes the server answer tool_choice "required"
// with 400, as some OpenAI-compatible endpoints do.
func RejectRequiredToolChoice() Option {
	return func(s *scripted.Server) { s.RejectRequiredToolChoice = true }
}

// Images makes the server answer image requests through fn (see
// scripted.Server.ImageResponder), e.g. to fail them.
func Images(fn func(*scripted.ImageRequest) scripted.Reply) Option {
	return func(s *scripted.Server) { s.ImageResponder = fn }
}

// Limit makes the server refuse requests past limit's pace with 429 and
// Retry-After (and x-ratelimit headers when limit.Headers).
func Limit(limit *scripted.RateLimit) Option {
	return func(s *scripted.Server) { s.Limit = limit }
}

// New starts a server answering with replies in order; once they are used
// up it answers with a 500 "script exhausted" error. The server is closed
// when the test ends.
func New(t testing.TB, replies ...scripted.Reply) *Server {
	t.Helper()
	return NewWith(t, scripted.Queue(replies...))
}

// NewWith starts a server answering with responder. The server is closed
// when the test ends.
func NewWith(t testing.TB, responder scripted.Responder, opts ...Option) *Server {
	t.Helper()
	s := &Server{Server: &scripted.Server{Responder: responder}}
	for _, opt := range opts {
		opt(s.Server)
	}
	s.httpServer = httptest.NewUnstartedServer(s.Server)
	s.httpServer.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.httpServer.Start()
	t.Cleanup(s.httpServer.Close)
	return s
}

// Connections returns how many connections clients have opened to the
// server so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// URL returns the base URL of the API, ending in /v1.
func (s *Server) URL() string { return s.httpServer.URL + "/v1" }

// Config returns an llm.Config for this server: its URL and HTTP client
// (whose connections close with the server) and the model [Model].
func (s *Server) Config() llm.Config {
	return llm.Config{
		BaseURL:    s.URL(),
		Model:      Model,
		HTTPClient: s.httpServer.Client(),
	}
}

// Text returns a reply with the given content.
func Text(content string) scripted.Reply {
	return scripted.Reply{Content: content}
}

// Call returns a reply calling one tool. args is used verbatim when it is a
// string or json.RawMessage (so it may be malformed JSON) and is marshalled
// otherwise; Call panics when that fails.
func Call(name string, args any) scripted.Reply {
	var raw string
	switch a := args.(type) {
	case string:
		raw = a
	case json.RawMessage:
		raw = string(a)
	default:
		data, err := json.Marshal(args)
		if err != nil {
			panic(fmt.Sprintf("llmtest: marshal arguments of %s: %v", name, err))
		}
		raw = string(data)
	}
	return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: name, Arguments: raw}}}
}

// Calls returns one reply holding the tool calls of all replies, i.e.
// parallel tool calls: Calls(Call("a", x), Call("b", y)).
func Calls(replies ...scripted.Reply) scripted.Reply {
	var r scripted.Reply
	for _, c := range replies {
		r.ToolCalls = append(r.ToolCalls, c.ToolCalls...)
	}
	return r
}

// Error returns a reply failing with an HTTP status and, when retryAfter is
// not empty, a Retry-After header.
func Error(status int, retryAfter string) scripted.Reply {
	return scripted.Reply{Status: status, RetryAfter: retryAfter}
}
