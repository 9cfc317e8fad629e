package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// wireMessage is a message as the Chat Completions protocol takes it.
// Encoded in one pass: openai-go's parameter types encode each message
// through nested marshalers that scan every string again at each level,
// which for a long system prompt and a growing conversation was most of a
// call's encoding.
// Its fields are in openai-go's order, so that a request's bytes stay as
// they were.
type wireMessage struct {
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Role       Role           `json:"role"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Function wireFunction `json:"function"`
	Type     string       `json:"type"`
}

type wireFunction struct {
	Arguments string `json:"arguments"`
	Name      string `json:"name"`
}

// encodeMessages returns msgs as the request's "messages" array.
func encodeMessages(msgs []Message) ([]byte, error) {
	wire := make([]wireMessage, len(msgs))
	for i, m := range msgs {
		w, err := wireMessageOf(m)
		if err != nil {
			return nil, fmt.Errorf("convert message %d: %w", i, err)
		}
		wire[i] = w
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // code and markup go as written
	if err := enc.Encode(wire); err != nil {
		return nil, fmt.Errorf("encode messages: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// wireMessageOf converts one message to its wire form.
func wireMessageOf(m Message) (wireMessage, error) {
	w := wireMessage{Role: m.Role}
	switch m.Role {
	case RoleSystem, RoleUser:
		w.Content = &m.Content
	case RoleTool:
		if m.ToolCallID == "" {
			return w, errors.New("tool message without tool_call_id")
		}
		w.Content, w.ToolCallID = &m.Content, m.ToolCallID
	case RoleAssistant:
		// Content may only be left out when the message calls tools.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			w.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		}
	default:
		return w, fmt.Errorf("unknown role %q", m.Role)
	}
	return w, nil
}
