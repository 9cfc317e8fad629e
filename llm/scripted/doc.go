// Package scripted is an OpenAI-compatible Chat Completions server whose
// answers come from a script instead of a model.
//
// A [Server] speaks the Chat Completions wire protocol on
// POST /v1/chat/completions (and /chat/completions), both plain JSON and
// server-sent-event streaming, so any OpenAI client can talk to it. Each
// request is answered by a [Responder]: [Queue] plays a fixed list of
// [Reply] values in order, [Func] computes one per request, and [DemoModel]
// is the small rule-based model behind `agentworker demo`.
//
// A Reply can be text, tool calls (with arguments that may be deliberately
// malformed), or an HTTP error with a Retry-After header, optionally after a
// delay. The server records every request it receives; see
// [Server.Requests].
package scripted
