package llm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// BenchmarkRequestEncoding encodes a request offering a dozen tools, as a
// build task's every call does: with schemas encoded per request, and with
// tools encoded once ahead (Tool.Encode).
func BenchmarkRequestEncoding(b *testing.B) {
	var tools []Tool
	for i := range 12 {
		props := map[string]any{}
		for j := range 4 {
			props[fmt.Sprintf("arg%d", j)] = map[string]any{"type": "string", "description": "What this argument means, in a sentence or two for the model."}
		}
		tools = append(tools, Tool{Name: fmt.Sprintf("tool_%d", i), Description: "Does one thing to the project's files and says what it did.",
			Parameters: map[string]any{"type": "object", "properties": props, "required": []string{"arg0"}, "additionalProperties": false}})
	}
	encoded := make([]Tool, len(tools))
	for i, t := range tools {
		var err error
		if encoded[i], err = t.Encode(); err != nil {
			b.Fatal(err)
		}
	}
	msgs := []Message{{Role: RoleSystem, Content: "You are a coding agent."}, {Role: RoleUser, Content: "create hello.txt"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "tool_1", Arguments: `{"arg0":"hello.txt"}`}}},
		{Role: RoleTool, ToolCallID: "c1", Content: "done"}}
	// A build's tenth call: a system prompt with the project's context,
	// nine tool calls and their results.
	long := []Message{{Role: RoleSystem, Content: strings.Repeat("Follow the project's rules; <keep> the \"style\" & tests green.\n", 100)},
		{Role: RoleUser, Content: "add a settings page"}}
	for i := range 9 {
		id := fmt.Sprintf("c%d", i)
		long = append(long, Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "read_file", Arguments: fmt.Sprintf(`{"path":"src/f%d.ts"}`, i)}}},
			Message{Role: RoleTool, ToolCallID: id, Content: strings.Repeat("export const x = () => { return \"<div>\" + y; };\n", 20)})
	}
	c := &Client{model: "m"}
	for _, bc := range []struct {
		name  string
		msgs  []Message
		tools []Tool
	}{{"SchemasPerRequest", msgs, tools}, {"EncodedOnce", msgs, encoded}, {"NoTools", msgs, nil}, {"TenthCall", long, encoded}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.body(Request{Messages: bc.msgs, Tools: bc.tools}, ToolChoiceAuto, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChunkDecoding decodes one streamed tool-call chunk as a call's
// every chunk is: into openai-go's chunk type, and into streamChunk folded
// into a call's answer (what stream does).
func BenchmarkChunkDecoding(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764000000,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ath\":\"out"}}]},"finish_reason":null}]}`)
	b.Run("SDKChunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c openai.ChatCompletionChunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StreamChunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c streamChunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
			var f streamFold
			if err := f.add(&c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
