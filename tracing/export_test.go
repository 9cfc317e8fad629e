package tracing_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/testing/jaegertest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/tracing"
)

// TestFromEnvExports: FromEnv exports over the protocol
// OTEL_EXPORTER_OTLP_PROTOCOL names, HTTP/protobuf or gRPC, to a real
// receiver (Jaeger): an attempt's spans, flushed by Shutdown, are found in
// the stored trace under the service OTEL_SERVICE_NAME names.
func TestFromEnvExports(t *testing.T) {
	j := jaegertest.Start(t)
	for _, tc := range []struct{ protocol, endpoint string }{{"http/protobuf", j.OTLPHTTP}, {"grpc", j.OTLPGRPC}} {
		t.Run(tc.protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_SERVICE_NAME", "agentworker-"+strings.ReplaceAll(tc.protocol, "/", "-"))
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			tel, err := tracing.FromEnv(t.Context(), slog.New(slog.DiscardHandler))
			if err != nil || tel == nil {
				t.Fatalf("FromEnv: %v, %v", tel, err)
			}
			trace := tracing.TraceIDOf("export-" + tc.protocol).String()
			ctx, attempt := tel.StartAttempt(t.Context(), tracing.Attempt{TraceID: trace, Agent: "build", Start: time.Now()})
			_, chat := tracing.StartChat(ctx, "m-1", "127.0.0.1")
			chat.End(tracing.ChatResult{ResponseModel: "m-1", InputTokens: 3, OutputTokens: 4}, nil)
			attempt.End(nil)
			if err := tel.Shutdown(t.Context()); err != nil {
				t.Fatalf("shutdown (flush): %v", err)
			}
			poll.Until(t, "Jaeger holds the trace", 30*time.Second, func() bool {
				resp, err := http.Get(j.Query + "/api/traces/" + trace)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var body struct {
					Data []struct {
						Spans []struct {
							OperationName string `json:"operationName"`
							ProcessID     string `json:"processID"`
						} `json:"spans"`
						Processes map[string]struct {
							ServiceName string `json:"serviceName"`
						} `json:"processes"`
					} `json:"data"`
				}
				if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data) == 0 {
					return false
				}
				d := body.Data[0]
				return len(d.Spans) == 2 && d.Processes[d.Spans[0].ProcessID].ServiceName == "agentworker-"+strings.ReplaceAll(tc.protocol, "/", "-")
			})
		})
	}
}
