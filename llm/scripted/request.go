package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentworker/agentworker/llm"
)

// Request is a decoded Chat Completions request as the server received it.
type Request struct {
	Model    string
	Messages []llm.Message
	// Tools are the offered tools, names and descriptions only: their
	// schemas stay undecoded (ToolParameters decodes one), since decoding
	// every schema of every request into maps was a third of a busy test
	// model's CPU and most responders look at names only.
	Tools []llm.Tool
	// schemas are the tools' parameters as sent, by position in Tools.
	schemas []json.RawMessage
	// ToolChoice is tool_choice when it is a string ("auto", "none",
	// "required"), the object's type (e.g. "function") when it is an object,
	// and empty when the request had none.
	ToolChoice string
	// ToolChoiceName is the function named by an object tool_choice.
	ToolChoiceName string
	Stream         bool
	StreamOptions  StreamOptions
	// Header holds the request's HTTP headers, Authorization included.
	Header http.Header
	// Body is the raw request body.
	Body []byte
}

// StreamOptions is the request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// HasTool reports whether the request offers a tool called name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// ToolParameters returns the JSON schema of the offered tool called name,
// decoded, or nil when the request offered no such tool or sent no schema.
func (r *Request) ToolParameters(name string) (map[string]any, error) {
	for i, t := range r.Tools {
		if t.Name != name {
			continue
		}
		if t.Parameters != nil || i >= len(r.schemas) {
			return t.Parameters, nil
		}
		var params map[string]any
		if err := json.Unmarshal(r.schemas[i], &params); err != nil {
			return nil, fmt.Errorf("decode parameters of tool %s: %w", name, err)
		}
		return params, nil
	}
	return nil, nil
}

// LastUserMessage returns the index and content of the last user message,
// or -1 and "" when there is none.
func (r *Request) LastUserMessage() (int, string) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == llm.RoleUser {
			return i, r.Messages[i].Content
		}
	}
	return -1, ""
}

// wireRequest is the JSON shape of a Chat Completions request.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      llm.Role        `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Stream        bool            `json:"stream"`
	StreamOptions *StreamOptions  `json:"stream_options"`
}

// decodeRequest decodes a request body.
func decodeRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("decode request body: %w", err)
	}
	req := Request{Model: w.Model, Stream: w.Stream}
	if w.StreamOptions != nil {
		req.StreamOptions = *w.StreamOptions
	}
	for i, m := range w.Messages {
		content, err := decodeContent(m.Content)
		if err != nil {
			return Request{}, fmt.Errorf("decode content of message %d: %w", i, err)
		}
		msg := llm.Message{Role: m.Role, Content: content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{
				ID:        tc.ID,
				Name:      tc.Function.Name,
				Arguments: tc.Function.Arguments,
			})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, llm.Tool{Name: t.Function.Name, Description: t.Function.Description})
		req.schemas = append(req.schemas, t.Function.Parameters)
	}
	if err := decodeToolChoice(w.ToolChoice, &req); err != nil {
		return Request{}, err
	}
	return req, nil
}

// decodeContent decodes message content: null, a string, or an array of
// content parts whose text parts are concatenated.
func decodeContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// decodeToolChoice fills req.ToolChoice and req.ToolChoiceName from a
// tool_choice that is absent, a string, or an object.
func decodeToolChoice(raw json.RawMessage, req *Request) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &req.ToolChoice); err != nil {
			return fmt.Errorf("decode tool_choice %s: %w", raw, err)
		}
		return nil
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("decode tool_choice %s: %w", raw, err)
	}
	if obj.Type == "" {
		return errors.New("decode tool_choice: object without type")
	}
	req.ToolChoice, req.ToolChoiceName = obj.Type, obj.Function.Name
	return nil
}
