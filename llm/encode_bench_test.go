package llm

import (
	"encoding/json"
	"fmt"
	"testing"
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
	c := &Client{model: "m"}
	for _, bc := range []struct {
		name  string
		tools []Tool
	}{{"SchemasPerRequest", tools}, {"EncodedOnce", encoded}, {"NoTools", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := c.params(Request{Messages: msgs, Tools: bc.tools}, ToolChoiceAuto)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
