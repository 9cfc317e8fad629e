package llm

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestStreamFold holds the fold of a call's streamed chunks to the API's
// accumulation rules: content, tool names and arguments append across
// chunks, ids and types are set when given, the finish reason and model are
// the latest chunk's, usage adds up, only choice 0 is the answer; a chunk
// of another stream or with an index out of bounds is malformed, and a
// stream without a finish reason was cut short.
func TestStreamFold(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		chunks  []string
		want    Response
		wantErr string
	}{
		{
			name: "ToolCallSplitAcrossChunks",
			chunks: []string{
				`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write_","arguments":"{\"pa"}}]}}]}`,
				`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"file","arguments":"th\":\"a\"}"}}]}}]}`,
				`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"finish","arguments":"{}"}}]}}]}`,
				`{"id":"c1","model":"m-2","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{"id":"c1","model":"m-2","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}`,
			},
			want: Response{Message: Message{Role: RoleAssistant, ToolCalls: []ToolCall{
				{ID: "call_1", Name: "write_file", Arguments: `{"path":"a"}`}, {ID: "call_2", Name: "finish", Arguments: "{}"}}},
				FinishReason: "tool_calls", Model: "m-2", Usage: Usage{PromptTokens: 10, CompletionTokens: 4, TotalTokens: 14}},
		},
		{
			name: "ContentOfChoiceZero",
			chunks: []string{
				`{"id":"c2","model":"m","choices":[{"index":0,"delta":{"content":"hel"}},{"index":1,"delta":{"content":"other"}}]}`,
				`{"id":"c2","model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
				`{"id":"c2","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			},
			want: Response{Message: Message{Role: RoleAssistant, Content: "hello"}, FinishReason: "stop", Model: "m",
				Usage: Usage{PromptTokens: 2, CompletionTokens: 2, TotalTokens: 4}},
		},
		{
			name: "CustomToolCallsDropped",
			chunks: []string{
				`{"id":"c3","choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"x","type":"custom","function":{"name":"n"}}]}}]}`,
				`{"id":"c3","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			want: Response{Message: Message{Role: RoleAssistant}, FinishReason: "tool_calls"},
		},
		{
			name: "AnotherStreamsChunk",
			chunks: []string{
				`{"id":"c4","choices":[{"index":0,"delta":{"content":"a"}}]}`,
				`{"id":"c5","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}`,
			},
			wantErr: `malformed chunk: the stream was "c4"`,
		},
		{
			name:    "ChoiceIndexOutOfBounds",
			chunks:  []string{`{"id":"c6","choices":[{"index":128,"delta":{"content":"a"}}]}`},
			wantErr: "malformed chunk: choice index 128",
		},
		{
			name:    "ToolCallIndexFarAhead",
			chunks:  []string{`{"id":"c7","choices":[{"index":0,"delta":{"tool_calls":[{"index":1000000000,"function":{"name":"n"}}]}}]}`},
			wantErr: "malformed chunk: tool call index 1000000000 after 0 calls",
		},
		{
			name:    "NoFinishReason",
			chunks:  []string{`{"id":"c8","choices":[{"index":0,"delta":{"content":"cut"}}]}`},
			wantErr: "ended before a finish reason",
		},
		{
			name:    "NoChoiceZero",
			chunks:  []string{`{"id":"c9","choices":[{"index":1,"delta":{"content":"a"},"finish_reason":"stop"}]}`},
			wantErr: "ended before a finish reason",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f streamFold
			var acc openai.ChatCompletionAccumulator
			accepted := true
			var err error
			for _, raw := range tt.chunks {
				var c streamChunk
				if err := json.Unmarshal([]byte(raw), &c); err != nil {
					t.Fatalf("decode %s: %v", raw, err)
				}
				accepted = accepted && acc.AddChunk(sdkChunk(&c))
				if err = f.add(&c); err != nil {
					break
				}
			}
			var got Response
			if err == nil {
				got, err = f.response()
			}
			if tt.wantErr != "" {
				if accepted && strings.Contains(tt.wantErr, "malformed") {
					t.Errorf("openai-go's accumulator took the chunks the fold refused")
				}
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				if tt.wantErr == "ended before a finish reason" && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("err = %v, want io.ErrUnexpectedEOF", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("response\n%s\nwant\n%s", gotJSON, wantJSON)
			}
			// The same chunks through openai-go's accumulator give the same answer.
			sdk, sdkErr := (&Client{}).response(&acc.ChatCompletion)
			sdkJSON, _ := json.Marshal(sdk)
			if !accepted || sdkErr != nil || string(sdkJSON) != string(gotJSON) {
				t.Errorf("openai-go's accumulator: accepted %v, %v,\n%s\nwant\n%s", accepted, sdkErr, sdkJSON, gotJSON)
			}
		})
	}
}

// sdkChunk is c as openai-go's chunk type.
func sdkChunk(c *streamChunk) openai.ChatCompletionChunk {
	out := openai.ChatCompletionChunk{ID: c.ID, Model: c.Model, Choices: make([]openai.ChatCompletionChunkChoice, len(c.Choices))}
	for i, ch := range c.Choices {
		d := openai.ChatCompletionChunkChoiceDelta{Role: ch.Delta.Role, Content: ch.Delta.Content, Refusal: ch.Delta.Refusal}
		for _, tc := range ch.Delta.ToolCalls {
			d.ToolCalls = append(d.ToolCalls, openai.ChatCompletionChunkChoiceDeltaToolCall{Index: tc.Index, ID: tc.ID, Type: tc.Type,
				Function: openai.ChatCompletionChunkChoiceDeltaToolCallFunction{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		out.Choices[i] = openai.ChatCompletionChunkChoice{Index: ch.Index, FinishReason: ch.FinishReason, Delta: d}
	}
	out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.TotalTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens
	return out
}
