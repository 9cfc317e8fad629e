package scripted

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentworker/agentworker/llm"
)

// maxBodyBytes bounds the size of a request body.
const maxBodyBytes = 32 << 20

// Server is an http.Handler speaking the Chat Completions protocol on
// POST /v1/chat/completions and POST /chat/completions, and the Images API
// on POST /v1/images/generations and POST /images/generations (a small
// generated PNG, inline as b64_json). Its fields must not change once it
// serves requests.
//
// The server keeps every request it receives (see [Server.Requests]), so a
// long-running server grows with its traffic.
type Server struct {
	// Responder answers requests. Without one every request gets a 500.
	Responder Responder
	// RejectRequiredToolChoice makes the server answer requests with
	// tool_choice "required" with a 400 error, as some OpenAI-compatible
	// endpoints do, without consulting the Responder.
	RejectRequiredToolChoice bool
	// Clock gives the created time of completions. Defaults to time.Now.
	Clock func() time.Time
	// DiscardRequests stops the server from keeping requests, for
	// long-running servers (the demo model, benchmarks).
	DiscardRequests bool
	// ImageResponder, when set, decides the fate of each image request: a
	// Reply with a Status fails it with that status (and RetryAfter,
	// ErrorMessage); any other Reply gets the picture. Without it every
	// image request gets the picture.
	ImageResponder func(*ImageRequest) Reply
	// Limit, when set, refuses chat completions past its pace with 429.
	Limit *RateLimit

	mu            sync.Mutex
	requests      []Request
	imageRequests []ImageRequest
	completions   int // completions answered, for their ids
	toolCalls     int // tool calls answered, for generated ids
}

// Requests returns every request received so far, in arrival order,
// including rejected ones.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// ServeHTTP answers one Chat Completions request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	images := r.URL.Path == "/v1/images/generations" || r.URL.Path == "/images/generations"
	if !images && r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions" {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no route for %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s is not allowed", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("read request body: %v", err))
		return
	}
	if images {
		s.serveImages(r.Context(), w, body, r.Header.Clone())
		return
	}
	req, decodeErr := decodeRequest(body)
	req.Header, req.Body = r.Header.Clone(), body
	s.record(req)
	if decodeErr != nil {
		writeError(w, http.StatusBadRequest, "", decodeErr.Error())
		return
	}
	if s.Limit != nil && !s.Limit.take(w.Header(), time.Now()) {
		writeError(w, http.StatusTooManyRequests, "", "rate limit reached for requests")
		return
	}
	if s.RejectRequiredToolChoice && req.ToolChoice == string(llm.ToolChoiceRequired) {
		writeError(w, http.StatusBadRequest, "", `tool_choice "required" is not supported by this endpoint`)
		return
	}

	reply := s.respond(&req)
	if reply.Delay > 0 {
		timer := time.NewTimer(reply.Delay)
		select {
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
	if reply.Status != 0 {
		if reply.ErrorCode != "" {
			writeCodedError(w, reply.Status, reply.RetryAfter, reply.ErrorMessage, reply.ErrorCode)
			return
		}
		writeError(w, reply.Status, reply.RetryAfter, reply.ErrorMessage)
		return
	}

	a := s.answer(&req, reply)
	if req.Stream {
		writeStream(w, a, req.StreamOptions.IncludeUsage)
		return
	}
	writeJSON(w, http.StatusOK, a.completion())
}

func (s *Server) record(req Request) {
	if s.DiscardRequests {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
}

// respond asks the Responder for the reply to a copy of req.
func (s *Server) respond(req *Request) Reply {
	if s.Responder == nil {
		return Reply{Status: http.StatusInternalServerError, ErrorMessage: "scripted server has no responder"}
	}
	c := *req
	return s.Responder.Respond(&c)
}

func (s *Server) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// answer is a successful reply ready to be written.
type answer struct {
	id        string
	created   int64
	model     string
	content   string
	toolCalls []llm.ToolCall
	usage     llm.Usage
}

// answer numbers the completion, fills in missing tool call ids and usage.
func (s *Server) answer(req *Request, reply Reply) answer {
	a := answer{
		created:   s.now().Unix(),
		model:     req.Model,
		content:   reply.Content,
		toolCalls: slices.Clone(reply.ToolCalls),
	}
	if a.model == "" {
		a.model = "scripted"
	}

	s.mu.Lock()
	s.completions++
	a.id = fmt.Sprintf("chatcmpl-scripted-%d", s.completions)
	for i := range a.toolCalls {
		if a.toolCalls[i].ID == "" {
			s.toolCalls++
			a.toolCalls[i].ID = fmt.Sprintf("call_%d", s.toolCalls)
		}
	}
	s.mu.Unlock()

	if reply.Usage != nil {
		a.usage = *reply.Usage
	} else {
		a.usage = estimateUsage(req, a)
	}
	return a
}

func (a answer) finishReason() string {
	if len(a.toolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// estimateUsage counts roughly one token per four bytes of text.
func estimateUsage(req *Request, a answer) llm.Usage {
	var prompt, completion int
	for _, m := range req.Messages {
		prompt += len(m.Content)
		for _, tc := range m.ToolCalls {
			prompt += len(tc.Name) + len(tc.Arguments)
		}
	}
	completion = len(a.content)
	for _, tc := range a.toolCalls {
		completion += len(tc.Name) + len(tc.Arguments)
	}
	u := llm.Usage{PromptTokens: int64(prompt/4 + 1), CompletionTokens: int64(completion/4 + 1)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// Wire shapes of a completion, a chunk and an error.
type (
	wireCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []wireChoice `json:"choices"`
		Usage   *llm.Usage   `json:"usage"`
	}
	wireChoice struct {
		Index        int          `json:"index"`
		Message      *wireMessage `json:"message,omitempty"`
		Delta        *wireDelta   `json:"delta,omitempty"`
		Logprobs     any          `json:"logprobs"`
		FinishReason *string      `json:"finish_reason"`
	}
	wireMessage struct {
		Role      string         `json:"role"`
		Content   *string        `json:"content"`
		Refusal   *string        `json:"refusal"`
		ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	}
	wireDelta struct {
		Role      string         `json:"role,omitempty"`
		Content   *string        `json:"content,omitempty"`
		ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	}
	wireToolCall struct {
		Index    *int         `json:"index,omitempty"`
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function wireFunction `json:"function"`
	}
	wireFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	wireError struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
)

// completion is the non-streamed chat.completion object.
func (a answer) completion() wireCompletion {
	msg := &wireMessage{Role: "assistant"}
	if a.content != "" {
		msg.Content = &a.content
	}
	for _, tc := range a.toolCalls {
		msg.ToolCalls = append(msg.ToolCalls, wireToolCall{
			ID:       tc.ID,
			Type:     "function",
			Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments},
		})
	}
	finish := a.finishReason()
	usage := a.usage
	return wireCompletion{
		ID:      a.id,
		Object:  "chat.completion",
		Created: a.created,
		Model:   a.model,
		Choices: []wireChoice{{Message: msg, FinishReason: &finish}},
		Usage:   &usage,
	}
}

// chunks returns the chat.completion.chunk objects of a streamed answer:
// the role, the content in several pieces, each tool call (id and name
// first, then its arguments in several pieces), the finish reason and, when
// includeUsage, the usage.
func (a answer) chunks(includeUsage bool) []wireCompletion {
	chunk := func(d wireDelta, finish *string) wireCompletion {
		return wireCompletion{
			ID:      a.id,
			Object:  "chat.completion.chunk",
			Created: a.created,
			Model:   a.model,
			Choices: []wireChoice{{Delta: &d, FinishReason: finish}},
		}
	}
	empty := ""
	out := []wireCompletion{chunk(wireDelta{Role: "assistant", Content: &empty}, nil)}
	for _, piece := range split(a.content, contentPieceRunes) {
		out = append(out, chunk(wireDelta{Content: &piece}, nil))
	}
	for i, tc := range a.toolCalls {
		out = append(out, chunk(wireDelta{ToolCalls: []wireToolCall{{
			Index: &i, ID: tc.ID, Type: "function",
			Function: wireFunction{Name: tc.Name},
		}}}, nil))
		for _, piece := range split(tc.Arguments, argumentPieceRunes) {
			out = append(out, chunk(wireDelta{ToolCalls: []wireToolCall{{
				Index: &i, Function: wireFunction{Arguments: piece},
			}}}, nil))
		}
	}
	finish := a.finishReason()
	out = append(out, chunk(wireDelta{}, &finish))
	if includeUsage {
		usage := a.usage
		out = append(out, wireCompletion{
			ID:      a.id,
			Object:  "chat.completion.chunk",
			Created: a.created,
			Model:   a.model,
			Choices: []wireChoice{},
			Usage:   &usage,
		})
	}
	return out
}

// Sizes of the pieces streamed content and tool arguments are cut into.
const (
	contentPieceRunes  = 6
	argumentPieceRunes = 8
)

// split cuts s into pieces of at most n runes.
func split(s string, n int) []string {
	var pieces []string
	for len(s) > 0 {
		end, runes := 0, 0
		for end < len(s) && runes < n {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
			runes++
		}
		pieces = append(pieces, s[:end])
		s = s[end:]
	}
	return pieces
}

// writeStream writes a streamed answer as server-sent events, flushing after
// each one, and stops early when the client goes away.
func writeStream(w http.ResponseWriter, a answer, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(data []byte) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for _, c := range a.chunks(includeUsage) {
		data, err := json.Marshal(c)
		if err != nil || !send(data) {
			return
		}
	}
	send([]byte("[DONE]"))
}

// writeError writes an OpenAI-style error body with status, and Retry-After
// when retryAfter is set.
func writeError(w http.ResponseWriter, status int, retryAfter, message string) {
	if message == "" {
		message = http.StatusText(status)
	}
	var e wireError
	e.Error.Message = message
	e.Error.Type, e.Error.Code = errorKind(status)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	writeJSON(w, status, e)
}

// writeCodedError is writeError with code as the error's type and code.
func writeCodedError(w http.ResponseWriter, status int, retryAfter, message, code string) {
	if message == "" {
		message = http.StatusText(status)
	}
	var e wireError
	e.Error.Message, e.Error.Type, e.Error.Code = message, code, &code
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	writeJSON(w, status, e)
}

// errorKind returns the OpenAI error type and code for a status.
func errorKind(status int) (string, *string) {
	code := func(s string) *string { return &s }
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error", code("invalid_api_key")
	case status == http.StatusForbidden:
		return "permission_error", nil
	case status == http.StatusNotFound:
		return "not_found_error", nil
	case status == http.StatusTooManyRequests:
		return "rate_limit_error", code("rate_limit_exceeded")
	case status >= http.StatusInternalServerError:
		return "server_error", nil
	default:
		return "invalid_request_error", nil
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("encode response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
