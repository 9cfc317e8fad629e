package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Chat is the span and the measurements of one model call.
type Chat struct {
	t     *Telemetry
	span  trace.Span
	start time.Time
	model string // the requested model, an attribute of the metrics
}

// Provider is the gen_ai.provider.name of an OpenAI-compatible endpoint:
// the wire protocol the service speaks, whoever answers it.
const Provider = "openai"

// StartChat starts the chat span of a call of model at server (host[:port])
// under the attempt's span in ctx, named "chat <model>".
func StartChat(ctx context.Context, model, server string) (context.Context, Chat) {
	t := from(ctx)
	if t == nil {
		return ctx, Chat{}
	}
	c := Chat{t: t, start: time.Now(), model: model}
	if t.tracer != nil {
		ctx, c.span = t.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.provider.name", Provider),
			attribute.String("gen_ai.request.model", model),
			attribute.String("server.address", server)))
	}
	return ctx, c
}

// ChatResult is what a model call's answer says of itself.
type ChatResult struct {
	ResponseModel             string
	InputTokens, OutputTokens int64
	FinishReason              string
}

// End ends the call's span with its answer (or err) and records its
// duration and, when answered, its tokens.
func (c Chat) End(res ChatResult, err error) {
	if c.t == nil {
		return
	}
	ctx := context.Background()
	if c.span != nil {
		ctx = trace.ContextWithSpan(ctx, c.span) // exemplars link to the span
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", Provider),
		attribute.String("gen_ai.request.model", c.model),
	}
	if err != nil {
		attrs = append(attrs, attribute.String("error.type", errorType(err)))
	} else if res.ResponseModel != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", res.ResponseModel))
	}
	if c.t.duration != nil {
		c.t.duration.Record(ctx, time.Since(c.start).Seconds(), metric.WithAttributes(attrs...))
	}
	if err == nil && c.t.tokens != nil {
		c.t.tokens.Record(ctx, res.InputTokens, metric.WithAttributes(append(attrs, attribute.String("gen_ai.token.type", "input"))...))
		c.t.tokens.Record(ctx, res.OutputTokens, metric.WithAttributes(append(attrs, attribute.String("gen_ai.token.type", "output"))...))
	}
	if c.span == nil {
		return
	}
	if err != nil {
		c.span.SetAttributes(attribute.String("error.type", errorType(err)))
		c.span.SetStatus(codes.Error, errorType(err))
	} else {
		c.span.SetAttributes(
			attribute.String("gen_ai.response.model", res.ResponseModel),
			attribute.Int64("gen_ai.usage.input_tokens", res.InputTokens),
			attribute.Int64("gen_ai.usage.output_tokens", res.OutputTokens))
		if res.FinishReason != "" {
			c.span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{res.FinishReason}))
		}
	}
	c.span.End()
}

// Tool is the execute_tool span of one tool call.
type Tool struct{ span trace.Span }

// Tool call outcomes, the agentworker.tool.outcome attribute.
const (
	OutcomeSuccess = "success" // the tool ran and did what was asked
	OutcomeFailure = "failure" // the tool ran and refused or failed; the model reads why
	OutcomeNotRun  = "not_run" // denied by a policy, or a repeat answered without running
	OutcomeError   = "error"   // an outage: the attempt ends
)

// StartTool starts the execute_tool span of a call of the tool name,
// named "execute_tool <name>". It never carries the call's arguments or
// its result: they hold file contents and may hold secrets.
func StartTool(ctx context.Context, name, callID string) (context.Context, Tool) {
	t := from(ctx)
	if t == nil || t.tracer == nil {
		return ctx, Tool{}
	}
	ctx, s := t.tracer.Start(ctx, "execute_tool "+name, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("gen_ai.tool.call.id", callID)))
	return ctx, Tool{s}
}

// End ends the call's span with its outcome (Outcome…); err, an outage,
// marks it failed.
func (t Tool) End(outcome string, err error) {
	if t.span == nil {
		return
	}
	t.span.SetAttributes(attribute.String("agentworker.tool.outcome", outcome))
	if err != nil {
		t.span.SetAttributes(attribute.String("error.type", errorType(err)))
		t.span.SetStatus(codes.Error, errorType(err))
	} else if outcome == OutcomeFailure {
		// The conventions' error.type for a tool the model called wrongly.
		t.span.SetAttributes(attribute.String("error.type", "tool_error"))
	}
	t.span.End()
}
