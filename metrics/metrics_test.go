package metrics_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/metrics"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	m, err := metrics.New(prometheus.NewRegistry(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	m.Observe(events.Log{Level: events.LevelDebug, Message: "llm call", Metadata: map[string]any{
		"model": "m1", "promptTokens": int64(120), "completionTokens": int64(30), "durationMs": int64(250)}})
	m.Observe(events.ToolCall{ToolName: "read_file", Success: true})
	m.Observe(events.ToolCall{ToolName: "read_file", Success: false})
	m.ObserveRun("build", 2*time.Second, nil)
	m.ObserveRun("build", time.Second, errors.New("boom"))

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`agentworker_tasks{status="queued"} 2`,
		`agentworker_tasks{status="running"} 0`,
		`agentworker_queue_depth 2`,
		`agentworker_llm_tokens_total{direction="prompt",model="m1"} 120`,
		`agentworker_llm_tokens_total{direction="completion",model="m1"} 30`,
		`agentworker_llm_request_duration_seconds_count{model="m1"} 1`,
		`agentworker_tool_calls_total{outcome="ok",tool="read_file"} 1`,
		`agentworker_tool_calls_total{outcome="failed",tool="read_file"} 1`,
		`agentworker_run_duration_seconds_count{outcome="error",type="build"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

// TestRateLimitMetrics: a model client observed by the metrics exports the
// provider's refusals, the wait and the pace, by endpoint and model.
func TestRateLimitMetrics(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(prometheus.NewRegistry(), dbtest.New(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(t, llmtest.Error(http.StatusTooManyRequests, "1"), llmtest.Text("ok"))
	cfg := srv.Config()
	cfg.MaxRetries, cfg.RateLimit.Observer, cfg.RateLimit.MaxRPM = -1, m, 600
	client, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	endpoint := strings.TrimPrefix(srv.URL(), "http://")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	labels := fmt.Sprintf(`{endpoint=%q,model=%q}`, endpoint, llmtest.Model)
	for _, want := range []string{
		`agentworker_llm_rate_limited_total` + labels + ` 1`,
		`agentworker_llm_pace_requests_per_second` + labels + ` 7`, // 600/min after one back-off (×0.7)
		`agentworker_llm_rate_limit_wait_seconds_total` + labels + ` 1.`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}
