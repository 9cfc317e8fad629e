package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentworker/agentworker/tracing"
)

type setup struct {
	tel    *tracing.Telemetry
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func newSetup(t *testing.T) setup {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithIDGenerator(tracing.IDGenerator()))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel, err := tracing.New(tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	return setup{tel: tel, spans: spans, reader: reader}
}

func attrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// TestAttemptTree: an attempt's span joins the stored trace as the child of
// the stored parent, and the claim, chat, execute_tool and apply spans hang
// under it with the GenAI conventions' attributes; the metrics are recorded
// by the conventions' names. A tool span carries no arguments.
func TestAttemptTree(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	start := time.Now()
	ctx, attempt := s.tel.StartAttempt(context.Background(), tracing.Attempt{TraceID: trace, TraceParent: parent,
		TaskID: "t1", TaskType: "build", Agent: "build", Number: 2, Start: start})
	tracing.Claimed(ctx, start, start.Add(time.Millisecond))
	cctx, chat := tracing.StartChat(ctx, "m-1", "llm.local")
	_, wait := tracing.Start(cctx, "rate_limit_wait")
	wait.End(nil)
	chat.End(tracing.ChatResult{ResponseModel: "m-1-2026", InputTokens: 120, OutputTokens: 7, FinishReason: "tool_calls"}, nil)
	_, tool := tracing.StartTool(ctx, "write_file", "call_1")
	tool.End(tracing.OutcomeSuccess, nil)
	_, failed := tracing.StartTool(ctx, "read_file", "call_2")
	failed.End(tracing.OutcomeError, errors.New("store down"))
	_, apply := tracing.Start(ctx, "apply")
	apply.End(nil)
	attempt.End(nil)

	byName := map[string]tracetest.SpanStub{}
	for _, sp := range s.spans.GetSpans() {
		byName[sp.Name] = sp
	}
	root, ok := byName["invoke_agent build"]
	if !ok {
		t.Fatalf("no invoke_agent span among %v", names(s.spans.GetSpans()))
	}
	if got := root.SpanContext.TraceID().String(); got != trace {
		t.Errorf("trace id %s, want the stored %s", got, trace)
	}
	if got := root.Parent.SpanID().String(); got != parent || !root.Parent.IsRemote() {
		t.Errorf("parent %s (remote %t), want the request's span %s", got, root.Parent.IsRemote(), parent)
	}
	if a := attrs(root); a["gen_ai.operation.name"].AsString() != "invoke_agent" || a["agentworker.attempt"].AsInt64() != 2 {
		t.Errorf("invoke_agent attributes %v", a)
	}
	for _, name := range []string{"claim", "chat m-1", "execute_tool write_file", "execute_tool read_file", "apply"} {
		sp, ok := byName[name]
		if !ok {
			t.Fatalf("no %q span among %v", name, names(s.spans.GetSpans()))
		}
		if sp.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("%s: parent %s, want invoke_agent %s", name, sp.Parent.SpanID(), root.SpanContext.SpanID())
		}
	}
	if w := byName["rate_limit_wait"]; w.Parent.SpanID() != byName["chat m-1"].SpanContext.SpanID() {
		t.Errorf("rate_limit_wait is not under its chat span")
	}
	c := attrs(byName["chat m-1"])
	for k, want := range map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
		"gen_ai.request.model": "m-1", "gen_ai.response.model": "m-1-2026", "gen_ai.usage.input_tokens": int64(120),
		"gen_ai.usage.output_tokens": int64(7), "server.address": "llm.local"} {
		if got := c[k].AsInterface(); got != want {
			t.Errorf("chat %s = %v, want %v", k, got, want)
		}
	}
	if fr := c["gen_ai.response.finish_reasons"].AsStringSlice(); len(fr) != 1 || fr[0] != "tool_calls" {
		t.Errorf("finish reasons %v", fr)
	}
	tl := attrs(byName["execute_tool write_file"])
	if tl["gen_ai.tool.name"].AsString() != "write_file" || tl["agentworker.tool.outcome"].AsString() != tracing.OutcomeSuccess {
		t.Errorf("execute_tool attributes %v", tl)
	}
	for k := range tl {
		if k != "gen_ai.operation.name" && k != "gen_ai.tool.name" && k != "gen_ai.tool.type" && k != "gen_ai.tool.call.id" && k != "agentworker.tool.outcome" {
			t.Errorf("execute_tool carries %s: only the name, call id and outcome may be exported", k)
		}
	}
	if f := byName["execute_tool read_file"]; f.Status.Description != "*errors.errorString" || attrs(f)["error.type"].AsString() != "*errors.errorString" {
		t.Errorf("a failed tool's span: status %+v, attributes %v (want the error's type, never its text)", f.Status, attrs(f))
	}

	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]int64{}
	durations := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "gen_ai.client.token.usage":
				for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
					typ, _ := dp.Attributes.Value("gen_ai.token.type")
					tokens[typ.AsString()] += dp.Sum
				}
			case "gen_ai.client.operation.duration":
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					durations += int(dp.Count)
				}
			}
		}
	}
	if tokens["input"] != 120 || tokens["output"] != 7 || durations != 1 {
		t.Errorf("metrics: tokens %v, durations %d; want input 120, output 7, one duration", tokens, durations)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

// TestRootTakesStoredTraceID: without a parent span the attempt is a root
// of the stored trace; a stored id that is not a W3C trace-id (an app's
// X-Trace-ID) maps to one id for every attempt, and is kept as an
// attribute.
func TestRootTakesStoredTraceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, stored string }{{"W3C", "0af7651916cd43dd8448eb211c80319c"}, {"AppID", "req-7f3a.e2e_1"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			for range 2 {
				_, a := s.tel.StartAttempt(context.Background(), tracing.Attempt{TraceID: tc.stored, Agent: "chat", Start: time.Now()})
				a.End(nil)
			}
			spans := s.spans.GetSpans()
			want := tracing.TraceIDOf(tc.stored)
			for _, sp := range spans {
				if sp.SpanContext.TraceID() != want || sp.Parent.IsValid() {
					t.Errorf("span in trace %s with parent %v; want a root of %s", sp.SpanContext.TraceID(), sp.Parent.SpanID(), want)
				}
				if got := attrs(sp)["agentworker.trace_id"].AsString(); (got == tc.stored) != (tc.name == "AppID") {
					t.Errorf("agentworker.trace_id %q", got)
				}
			}
			if tc.name == "W3C" && want.String() != tc.stored {
				t.Errorf("TraceIDOf(%s) = %s", tc.stored, want)
			}
		})
	}
}

// TestIncoming: a valid traceparent names the trace and the caller's span;
// a malformed one is ignored.
func TestIncoming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		ok           bool
	}{
		{"Valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"NotSampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"ZeroTrace", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"ZeroSpan", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"Garbage", "hello<script>", false},
		{"None", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.header != "" {
				h.Set("traceparent", tc.header)
			}
			ctx, trace, ok := tracing.Incoming(context.Background(), h)
			if ok != tc.ok {
				t.Fatalf("ok %t, want %t", ok, tc.ok)
			}
			if ok && (trace != "4bf92f3577b34da6a3ce929d0e0e4736" || tracing.SpanID(ctx) != "00f067aa0ba902b7") {
				t.Errorf("trace %q, span %q", trace, tracing.SpanID(ctx))
			}
			if !ok && (trace != "" || tracing.SpanID(ctx) != "") {
				t.Errorf("an invalid traceparent left trace %q, span %q", trace, tracing.SpanID(ctx))
			}
		})
	}
}

// TestEnabled: export is on only with an endpoint and without
// OTEL_SDK_DISABLED=true.
func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
	} {
		if got := tracing.Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: enabled %t, want %t", tc.env, got, tc.want)
		}
	}
}

// TestOffCostsNothing: with tracing off (no attempt's span in the
// context), the calls on the loop's path allocate nothing.
func TestOffCostsNothing(t *testing.T) {
	ctx := context.Background()
	var off *tracing.Telemetry
	allocs := testing.AllocsPerRun(1000, func() {
		actx, a := off.StartAttempt(ctx, tracing.Attempt{Agent: "build"})
		tracing.Claimed(actx, time.Time{}, time.Time{})
		cctx, chat := tracing.StartChat(actx, "m", "h")
		_, wait := tracing.Start(cctx, "rate_limit_wait")
		wait.End(nil)
		chat.End(tracing.ChatResult{InputTokens: 1}, nil)
		_, tool := tracing.StartTool(actx, "read_file", "c")
		tool.End(tracing.OutcomeSuccess, nil)
		a.End(nil)
	})
	if allocs != 0 {
		t.Errorf("tracing off allocates %.1f times per model and tool call", allocs)
	}
}
