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
// Server errors (5xx), timeouts and dropped connections are retried by
// openai-go itself up to [Config.MaxRetries] times. An error the endpoint
// answered with is returned as an [*APIError]; [IsTransient] tells whether
// trying again later may succeed. Cancellation of the caller's context is
// preserved: errors.Is(err, context.Canceled) holds.
//
// # Rate limits
//
// Calls to one endpoint and model leave a queue at the pace the provider
// allows: read from its x-ratelimit-* headers, or found from its refusals
// (slow start, back-off, probing), capped by [RateLimitConfig.MaxRPM] and
// MaxTPM, and shared with other replicas through a [Sharer]. A refusal (429,
// or 503 with Retry-After) is waited out as the provider asks and tried
// again, outside MaxRetries; a call that has waited
// [RateLimitConfig.MaxWait] in all fails with a [*RateLimitError].
// [Request.OnRateLimitWait] is told of each wait of a second or more.
//
// # tool_choice "required"
//
// Some OpenAI-compatible endpoints reject tool_choice "required". When one
// answers such a request with 400 or 422, the call is repeated once with
// "auto", [Response.ToolChoiceFallback] is set, and the client sends "auto"
// from then on.
package llm
