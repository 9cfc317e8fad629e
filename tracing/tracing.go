// Package tracing exports a task's work as OpenTelemetry spans and the
// GenAI metrics, by the GenAI semantic conventions: an invoke_agent span per
// attempt (with its claim), a chat span per model call, an execute_tool
// span per tool call, spans for the apply and for rate-limit waits, and the
// gen_ai.client.token.usage and gen_ai.client.operation.duration
// histograms.
//
// It is on when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or a signal's own
// endpoint) is set and OTEL_SDK_DISABLED is not true; the SDK reads the
// other OTEL_* variables. Off, a *Telemetry is nil and every function here
// returns at once: the attempt's context then carries no span, and the
// spans below it are never started.
//
// Only the attempt's span is started with the process's Telemetry; every
// other span finds it in its context, so that the model client, the tools
// and the change set need no new parameter.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of every span and instrument.
const scope = "github.com/agentworker/agentworker"

// Telemetry is the process's tracer and GenAI instruments. A nil
// *Telemetry is tracing off.
type Telemetry struct {
	tracer   trace.Tracer
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
	shutdown []func(context.Context) error
}

// Enabled reports whether the environment asks for export: an OTLP
// endpoint is set and the SDK is not disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" ||
		getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// FromEnv returns the Telemetry the OTEL_* variables ask for, or nil when
// they ask for none (see Enabled). Traces and metrics go to OTLP over
// HTTP/protobuf or gRPC, per OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL
// (http/protobuf when unset, as the SDK's default); OTEL_TRACES_EXPORTER or
// OTEL_METRICS_EXPORTER "none" turns that signal off. The service is named
// agentworker unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. The SDK's own failures (an export the endpoint refused) are
// logged to log at warn level.
func FromEnv(ctx context.Context, log *slog.Logger) (*Telemetry, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	// The SDK reports failures only through its process-wide handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export", slog.String("err", err.Error()))
	}))
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "agentworker")), env)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	var (
		tp       trace.TracerProvider
		mp       metric.MeterProvider
		shutdown []func(context.Context) error
	)
	if !strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		exp, err := traceExporter(ctx, protocol("TRACES"))
		if err != nil {
			return nil, err
		}
		p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(idGenerator{}))
		tp, shutdown = p, append(shutdown, p.Shutdown)
	}
	if !strings.EqualFold(os.Getenv("OTEL_METRICS_EXPORTER"), "none") {
		exp, err := metricExporter(ctx, protocol("METRICS"))
		if err != nil {
			return nil, err
		}
		p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		mp, shutdown = p, append(shutdown, p.Shutdown)
	}
	t, err := New(tp, mp)
	if err != nil {
		return nil, err
	}
	t.shutdown = shutdown
	return t, nil
}

// ForEndpoint returns Telemetry exporting traces and metrics to the OTLP/HTTP
// receiver at url (http://host:port), whatever the OTEL_* variables say of
// the endpoint: the bench's tracing scenario.
func ForEndpoint(ctx context.Context, url string) (*Telemetry, error) {
	texp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("tracing: traces to %s: %w", url, err)
	}
	mexp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(url+"/v1/metrics"))
	if err != nil {
		return nil, fmt.Errorf("tracing: metrics to %s: %w", url, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "agentworker-bench"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(texp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(idGenerator{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)), sdkmetric.WithResource(res))
	t, err := New(tp, mp)
	if err != nil {
		return nil, err
	}
	t.shutdown = []func(context.Context) error{tp.Shutdown, mp.Shutdown}
	return t, nil
}

// protocol is the OTLP protocol of signal (TRACES or METRICS) as the SDK
// reads it: the signal's own variable, else the general one, else
// http/protobuf.
func protocol(signal string) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return "http/protobuf"
}

func traceExporter(ctx context.Context, proto string) (sdktrace.SpanExporter, error) {
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf":
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q for traces: want grpc or http/protobuf", proto)
}

func metricExporter(ctx context.Context, proto string) (sdkmetric.Exporter, error) {
	switch proto {
	case "grpc":
		return otlpmetricgrpc.New(ctx)
	case "http/protobuf":
		return otlpmetrichttp.New(ctx)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q for metrics: want grpc or http/protobuf", proto)
}

// Bucket boundaries the GenAI conventions advise for the two histograms.
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

// New returns Telemetry over tp and mp (either may be nil: no spans, or no
// metrics). Spans of a trace that has no parent take the trace id of the
// request that created the task only when tp is an SDK provider built with
// this package's ID generator (FromEnv's); tests pass their own.
func New(tp trace.TracerProvider, mp metric.MeterProvider) (*Telemetry, error) {
	t := &Telemetry{}
	if tp != nil {
		t.tracer = tp.Tracer(scope)
	}
	if mp != nil {
		m := mp.Meter(scope)
		var err error
		if t.tokens, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
			metric.WithDescription("Number of input and output tokens used."),
			metric.WithExplicitBucketBoundaries(tokenBuckets...)); err != nil {
			return nil, fmt.Errorf("tracing: gen_ai.client.token.usage: %w", err)
		}
		if t.duration, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("GenAI operation duration."),
			metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
			return nil, fmt.Errorf("tracing: gen_ai.client.operation.duration: %w", err)
		}
	}
	return t, nil
}

// IDGenerator returns the ID generator a provider passed to New should use
// so that a root span takes the task's trace id: sdktrace.WithIDGenerator.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

// Shutdown sends what is still buffered and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

type ctxKey struct{}

// from returns the Telemetry of the attempt ctx belongs to, or nil.
func from(ctx context.Context) *Telemetry {
	t, _ := ctx.Value(ctxKey{}).(*Telemetry)
	return t
}

// TraceIDOf is the OpenTelemetry trace id of a task's stored trace id: the
// id itself when it is a W3C trace-id (32 lowercase hex, not all zeros, as
// the API makes them), else the first 16 bytes of its SHA-256, so that
// every attempt of the task still lands in one trace.
func TraceIDOf(stored string) trace.TraceID {
	if id, err := trace.TraceIDFromHex(stored); err == nil {
		return id
	}
	sum := sha256.Sum256([]byte(stored))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

type wantedTraceKey struct{}

// idGenerator is the SDK's random generator, except that a root span
// started with a wanted trace id in its context (withTraceID) takes it.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(wantedTraceKey{}).(trace.TraceID)
	if !ok || !tid.IsValid() {
		tid = randomTraceID()
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	}
	return id
}

func randomSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	}
	return id
}

// withParent returns ctx set up to start a span of the trace stored: the
// child of the span parent (16 hex) when it is one, else a root span whose
// trace id is TraceIDOf(stored).
func withParent(ctx context.Context, stored, parent string) context.Context {
	tid := TraceIDOf(stored)
	if sid, err := trace.SpanIDFromHex(parent); err == nil && sid.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	}
	// No span of the request to join: a root, in the request's trace (a
	// trace of its own when the task has none).
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	if stored == "" {
		return ctx
	}
	return context.WithValue(ctx, wantedTraceKey{}, tid)
}

// Incoming reads the W3C trace context h carries (traceparent and
// tracestate): when valid, it returns ctx holding the caller's span, which
// StartRequest and SpanID read, and the caller's trace id.
func Incoming(ctx context.Context, h http.Header) (context.Context, string, bool) {
	if h.Get("Traceparent") == "" {
		return ctx, "", false
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h)))
	if !sc.IsValid() {
		return ctx, "", false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), sc.TraceID().String(), true
}

// SpanID is the span ctx is in (a span of this process or a caller's,
// from traceparent), as 16 hex, or "" when none: what a task created in
// ctx stores as its trace parent.
func SpanID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.SpanID().String()
}

// Span is one operation's span; the zero Span (tracing off, or no
// attempt's span in the context) does nothing.
type Span struct {
	span trace.Span
}

// End ends the span; a non-nil err marks it failed with err's type only
// (an error's text may quote a file or a prompt).
func (s Span) End(err error) {
	if s.span == nil {
		return
	}
	if err != nil {
		s.span.SetAttributes(attribute.String("error.type", errorType(err)))
		s.span.SetStatus(codes.Error, errorType(err))
	}
	s.span.End()
}

// SetString sets a string attribute.
func (s Span) SetString(key, v string) {
	if s.span != nil {
		s.span.SetAttributes(attribute.String(key, v))
	}
}

// SetInt sets an integer attribute.
func (s Span) SetInt(key string, v int) {
	if s.span != nil {
		s.span.SetAttributes(attribute.Int(key, v))
	}
}

// errorType names err's kind without its text: the Go type, or
// "context.Canceled" and "context.DeadlineExceeded" by name.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	}
	// The innermost error says most of what failed.
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return fmt.Sprintf("%T", err)
}

// Start starts an internal span named name under the span in ctx, when
// that span is an attempt's (tracing on).
func Start(ctx context.Context, name string) (context.Context, Span) {
	t := from(ctx)
	if t == nil || t.tracer == nil {
		return ctx, Span{}
	}
	ctx, s := t.tracer.Start(ctx, name)
	return ctx, Span{s}
}

// Attempt says what an invoke_agent span is of.
type Attempt struct {
	// TraceID and TraceParent are the task's stored trace id and the span
	// id of the request that created it ("" when none).
	TraceID, TraceParent string
	TaskID, TaskType     string
	// Agent is the agent's name, else the task type.
	Agent  string
	Number int
	// Start is when the attempt began: before its claim.
	Start time.Time
}

// StartAttempt starts the invoke_agent span of an attempt, joined to the
// trace of the request that created the task, and returns ctx carrying it
// and t for the spans below. nil t: ctx as it is and a Span that does
// nothing.
func (t *Telemetry) StartAttempt(ctx context.Context, a Attempt) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx = context.WithValue(ctx, ctxKey{}, t)
	if t.tracer == nil {
		return ctx, Span{}
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", a.Agent),
		attribute.String("gen_ai.conversation.id", a.TaskID),
		attribute.String("agentworker.task.id", a.TaskID),
		attribute.String("agentworker.task.type", a.TaskType),
		attribute.Int("agentworker.attempt", a.Number),
	}
	if _, err := trace.TraceIDFromHex(a.TraceID); err != nil && a.TraceID != "" {
		// The logs carry this id; the spans one derived from it.
		attrs = append(attrs, attribute.String("agentworker.trace_id", a.TraceID))
	}
	ctx, s := t.tracer.Start(withParent(ctx, a.TraceID, a.TraceParent), "invoke_agent "+a.Agent,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(a.Start), trace.WithAttributes(attrs...))
	return ctx, Span{s}
}

// Claimed records the attempt's claim, from start to end, under the span
// in ctx.
func Claimed(ctx context.Context, start, end time.Time) {
	t := from(ctx)
	if t == nil || t.tracer == nil {
		return
	}
	_, s := t.tracer.Start(ctx, "claim", trace.WithTimestamp(start))
	s.End(trace.WithTimestamp(end))
}

// StartRequest starts the server span of an API request: the child of the
// caller's span when ctx holds one (Incoming), else a root in the trace
// stored (the request's trace id). name is the route ("POST /v1/…").
func (t *Telemetry) StartRequest(ctx context.Context, name, stored string) (context.Context, Span) {
	if t == nil || t.tracer == nil {
		return ctx, Span{}
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = withParent(ctx, stored, "")
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, Span{s}
}

// SetStatus records an HTTP answer's status on a request's span (5xx
// marks it failed, as the HTTP conventions have it for a server).
func (s Span) SetStatus(status int) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		s.span.SetStatus(codes.Error, "")
	}
}
