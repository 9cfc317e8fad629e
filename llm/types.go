package llm

import (
	"encoding/json"
	"time"
)

// Role is the author of a conversation message.
type Role string

// Message roles of the Chat Completions protocol.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one conversation message. It is plain JSON so a conversation can
// be checkpointed in the database and resumed.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call the model asked for. Arguments is the raw JSON
// text the model produced; it may be malformed.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool describes a function the model may call. Parameters is a JSON Schema object.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`

	// wire is the tool as sent, when Encode made it: a schema is encoded
	// once, not on every call (reflection over nested maps, keys sorted).
	wire json.RawMessage
}

// ToolChoice controls whether the model must call a tool.
type ToolChoice string

// Tool choices of the Chat Completions protocol.
const (
	ToolChoiceAuto     ToolChoice = "auto"
	ToolChoiceNone     ToolChoice = "none"
	ToolChoiceRequired ToolChoice = "required"
)

// Usage is the token count of one call.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + o.PromptTokens,
		CompletionTokens: u.CompletionTokens + o.CompletionTokens,
		TotalTokens:      u.TotalTokens + o.TotalTokens,
	}
}

// Request is one Chat Completions call.
type Request struct {
	// Model is the model to call; empty: the client's (Config.Model).
	Model      string
	Messages   []Message
	Tools      []Tool
	ToolChoice ToolChoice // empty means the endpoint's default; sent only with Tools
	// ResponseSchema, when set, asks for structured output: the answer's
	// content is JSON matching the schema (response_format json_schema).
	ResponseSchema *ResponseSchema
	// OnDelta, when set, makes the call stream and receives each content
	// fragment as it arrives. It is called from the calling goroutine.
	OnDelta func(delta string)
	// OnRateLimitWait, when set, is told before the call waits d or longer
	// (a second at least) for the provider's rate limit: its pace, or a
	// refusal's Retry-After.
	OnRateLimitWait func(d time.Duration)
}

// Response is the model's answer to one call.
type Response struct {
	Message      Message // role assistant: content and/or tool calls
	FinishReason string
	Usage        Usage
	Model        string
	// ToolChoiceFallback is true when the request asked for tool_choice
	// "required" but "auto" was sent instead, because the endpoint rejected
	// "required" on this call (which was then repeated) or on an earlier one.
	ToolChoiceFallback bool
	// RateLimitWait is how long the call waited for the provider's rate
	// limit: its pace and the waits its refusals asked for. Complete sets
	// it when the call fails too (the rest of the Response is then empty).
	RateLimitWait time.Duration
}

// ResponseSchema is a JSON Schema for structured output.
type ResponseSchema struct {
	Name   string         // a-z, A-Z, 0-9, _ and -, at most 64
	Schema map[string]any // a JSON Schema object
	Strict bool           // ask the endpoint to adhere exactly
}
