package llm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// streamChunk is a chat.completion.chunk with the fields a Response is
// made of. openai-go's own chunk type decodes through reflection and keeps
// every field's raw JSON beside it: with a dozen chunks a call that was a
// tenth of a busy worker's CPU. This one is decoded by encoding/json and
// folded by streamFold.
type streamChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int64  `json:"index"`
		FinishReason string `json:"finish_reason"`
		Delta        struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				Index    int64  `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// streamFold is a call's answer as its chunks arrive: the API's
// accumulation rules for the one choice a call asks for (index 0).
// openai-go's accumulator keeps every choice and guards a caller mutating
// its result between chunks; its bookkeeping allocated about 55 KB a call
// that streams a tool call, a third of a busy worker's allocations.
type streamFold struct {
	id           string
	model        string
	finishReason string
	seen         bool // choice 0 arrived
	content      strings.Builder
	calls        []streamedCall
	usage        Usage
}

type streamedCall struct {
	id, typ    string
	name, args strings.Builder
}

// maxChoiceIndex and maxToolCallGrowth bound what one chunk may make the
// fold allocate: the API's 128 choices, and a tool call's index at most
// 128 past the calls so far (sparse indices allowed, not unbounded ones).
const (
	maxChoiceIndex    = 127
	maxToolCallGrowth = 128
)

// add folds c in, as openai-go's accumulator does: an id that changes
// mid-stream, or an index out of bounds, is a malformed chunk; content,
// names and arguments append; ids and types are set when given; the
// finish reason and the model are the latest chunk's; usage adds up.
func (f *streamFold) add(c *streamChunk) error {
	if f.id != "" && c.ID != f.id {
		return fmt.Errorf("accumulate stream chunk %q: malformed chunk: the stream was %q", c.ID, f.id)
	}
	f.id = c.ID
	for i := range c.Choices {
		choice := &c.Choices[i]
		if choice.Index < 0 || choice.Index > maxChoiceIndex {
			return fmt.Errorf("accumulate stream chunk %q: malformed chunk: choice index %d", c.ID, choice.Index)
		}
		if choice.Index != 0 {
			continue
		}
		f.seen = true
		f.finishReason = choice.FinishReason
		f.content.WriteString(choice.Delta.Content)
		for j := range choice.Delta.ToolCalls {
			tc := &choice.Delta.ToolCalls[j]
			index := tc.Index
			if index == -1 {
				index = 0
			}
			if index < 0 || index >= int64(len(f.calls))+maxToolCallGrowth {
				return fmt.Errorf("accumulate stream chunk %q: malformed chunk: tool call index %d after %d calls", c.ID, tc.Index, len(f.calls))
			}
			for int64(len(f.calls)) <= index {
				f.calls = append(f.calls, streamedCall{})
			}
			call := &f.calls[index]
			if tc.ID != "" {
				call.id = tc.ID
			}
			if tc.Type != "" {
				call.typ = tc.Type
			}
			call.name.WriteString(tc.Function.Name)
			call.args.WriteString(tc.Function.Arguments)
		}
	}
	f.model = c.Model
	f.usage = f.usage.Add(Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens, TotalTokens: c.Usage.TotalTokens})
	return nil
}

// response is the folded answer; a stream that ended without a finish
// reason was cut short.
func (f *streamFold) response() (Response, error) {
	if !f.seen || f.finishReason == "" {
		return Response{}, fmt.Errorf("read stream: ended before a finish reason: %w", io.ErrUnexpectedEOF)
	}
	msg := Message{Role: RoleAssistant, Content: f.content.String()}
	for i := range f.calls {
		call := &f.calls[i]
		msg.ToolCalls = appendToolCall(msg.ToolCalls, call.typ, ToolCall{ID: call.id, Name: call.name.String(), Arguments: call.args.String()})
	}
	return Response{Message: msg, FinishReason: f.finishReason, Usage: f.usage, Model: f.model}, nil
}

// newStream posts a streamed chat completion request through openai-go
// (its retries, auth and error types), takes the response unread, and
// reads its events as streamChunks.
func (c *Client) newStream(ctx context.Context, body []byte) *ssestream.Stream[streamChunk] {
	var raw *http.Response
	err := c.api.Post(ctx, chatPath, body, &raw)
	return ssestream.NewStream[streamChunk](ssestream.NewDecoder(raw), err)
}

// chatPath is the Chat Completions endpoint, under the client's base URL.
const chatPath = "chat/completions"
