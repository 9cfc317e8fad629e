package llm

import (
	"context"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// streamChunk is a chat.completion.chunk with the fields a Response is
// made of. openai-go's own chunk type decodes through reflection and keeps
// every field's raw JSON beside it: with a dozen chunks a call that was a
// tenth of a busy worker's CPU. This one is decoded by encoding/json and
// handed to openai-go's accumulator as its chunk type (sdk).
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

// sdk is c as openai-go's chunk type, for its accumulator.
func (c *streamChunk) sdk() openai.ChatCompletionChunk {
	out := openai.ChatCompletionChunk{ID: c.ID, Model: c.Model, Choices: make([]openai.ChatCompletionChunkChoice, len(c.Choices))}
	for i, ch := range c.Choices {
		d := openai.ChatCompletionChunkChoiceDelta{Role: ch.Delta.Role, Content: ch.Delta.Content, Refusal: ch.Delta.Refusal}
		if len(ch.Delta.ToolCalls) > 0 {
			d.ToolCalls = make([]openai.ChatCompletionChunkChoiceDeltaToolCall, len(ch.Delta.ToolCalls))
			for j, tc := range ch.Delta.ToolCalls {
				d.ToolCalls[j] = openai.ChatCompletionChunkChoiceDeltaToolCall{Index: tc.Index, ID: tc.ID, Type: tc.Type,
					Function: openai.ChatCompletionChunkChoiceDeltaToolCallFunction{Name: tc.Function.Name, Arguments: tc.Function.Arguments}}
			}
		}
		out.Choices[i] = openai.ChatCompletionChunkChoice{Index: ch.Index, FinishReason: ch.FinishReason, Delta: d}
	}
	out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.TotalTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens
	return out
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
