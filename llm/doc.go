// Package llm wraps the OpenAI Chat Completions API (openai-go) behind a small
// client that speaks in this project's own types: [Message], [Tool],
// [Request] and [Response].
//
// A [Client] is created once with [New] and is safe for concurrent use. Each
// [Client.Complete] call sends one conversation and returns the assistant's
// answer: its text, the tool calls it asked for (already assembled when the
// answer was streamed) and the token usage.
//
// # Streaming
//
// When [Request.OnDelta] is set the call streams (server-sent events, with
// stream_options.include_usage) and OnDelta receives every content fragment
// in order; the returned [Response] is the same as for a non-streamed call.
//
// # Errors and retries
//
// Rate limits (429) and server errors (5xx) are retried by openai-go itself,
// honouring Retry-After, up to [Config.MaxRetries] times. An error the
// endpoint answered with is returned as an [*APIError]; [IsTransient] tells
// whether trying again later may succeed. Cancellation of the caller's
// context is preserved: errors.Is(err, context.Canceled) holds.
//
// # tool_choice "required"
//
// Some OpenAI-compatible endpoints reject tool_choice "required". When one
// answers such a request with 400 or 422, the call is repeated once with
// "auto", [Response.ToolChoiceFallback] is set, and the client sends "auto"
// from then on.
package llm
