package llm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestEncodeMessagesAsOpenAIGo: the messages encoded in one pass are the
// JSON openai-go's parameter types make of them.
func TestEncodeMessagesAsOpenAIGo(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{{ID: "c1", Name: "write_file", Arguments: `{"path":"a<b>&.ts","content":"x\n"}`}, {ID: "c2", Name: "finish", Arguments: `{}`}}
	msgs := []Message{
		{Role: RoleSystem, Content: "You are <b>a coding agent</b> & \"careful\".\n\tTabs, \u2028 and ünïcode."},
		{Role: RoleUser, Content: ""},
		{Role: RoleUser, Content: "create hello.txt"},
		{Role: RoleAssistant, ToolCalls: calls},
		{Role: RoleTool, ToolCallID: "c1", Content: "wrote a<b>&.ts"},
		{Role: RoleAssistant, Content: "thinking aloud", ToolCalls: calls[1:]},
		{Role: RoleAssistant},
		{Role: RoleAssistant, Content: "done"},
	}
	var sdk []openai.ChatCompletionMessageParamUnion
	for _, m := range msgs {
		switch m.Role {
		case RoleSystem:
			sdk = append(sdk, openai.SystemMessage(m.Content))
		case RoleUser:
			sdk = append(sdk, openai.UserMessage(m.Content))
		case RoleTool:
			sdk = append(sdk, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			var p openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				p.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				p.ToolCalls = append(p.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments}}})
			}
			sdk = append(sdk, openai.ChatCompletionMessageParamUnion{OfAssistant: &p})
		}
	}
	want, err := json.Marshal(sdk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeMessages(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("encoded messages are not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("encoded messages\n%s\nwant (openai-go)\n%s", got, want)
	}
}

// TestEncodeMessagesRefuses: a tool message without its call's id and an
// unknown role are refused, naming the message.
func TestEncodeMessagesRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		msgs []Message
		want string
	}{
		{[]Message{{Role: RoleUser, Content: "x"}, {Role: RoleTool, Content: "y"}}, "convert message 1: tool message without tool_call_id"},
		{[]Message{{Role: "critic", Content: "x"}}, `convert message 0: unknown role "critic"`},
	} {
		if _, err := encodeMessages(tc.msgs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("encodeMessages(%v) = %v, want %q", tc.msgs, err, tc.want)
		}
	}
}
