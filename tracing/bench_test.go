package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentworker/agentworker/tracing"
)

// BenchmarkIteration is the CPU one loop iteration spends on tracing: a
// chat span with its metrics and an execute_tool span, on (exported in
// batches over OTLP/HTTP to a loopback endpoint that accepts and drops)
// and off. The bench's loop scenario measures an iteration's own time at
// a few milliseconds.
func BenchmarkIteration(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	on, err := tracing.ForEndpoint(context.Background(), srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = on.Shutdown(context.Background()) }()
	for _, bc := range []struct {
		name string
		tel  *tracing.Telemetry
	}{{"Off", nil}, {"On", on}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, attempt := bc.tel.StartAttempt(context.Background(), tracing.Attempt{TraceID: "bench", Agent: "build", Start: time.Now()})
			defer attempt.End(nil)
			b.ReportAllocs()
			for b.Loop() {
				_, chat := tracing.StartChat(ctx, "m-1", "127.0.0.1")
				chat.End(tracing.ChatResult{ResponseModel: "m-1", InputTokens: 1000, OutputTokens: 50, FinishReason: "tool_calls"}, nil)
				_, tool := tracing.StartTool(ctx, "read_file", "call_1")
				tool.End(tracing.OutcomeSuccess, nil)
			}
		})
	}
}
