// Package metrics holds agentworker's Prometheus metrics: tasks by status and
// queue depth (read from Postgres at scrape time, so every replica reports
// the same cluster-wide numbers), run durations, LLM latency and tokens,
// the provider's rate limit (waits, refusals, pace), tool calls and
// failures. The registry is injected; nothing is global.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Metrics are the process's collectors.
type Metrics struct {
	reg         *prometheus.Registry
	runDuration *prometheus.HistogramVec
	llmLatency  *prometheus.HistogramVec
	llmTokens   *prometheus.CounterVec
	toolCalls   *prometheus.CounterVec
	rateWait    *prometheus.CounterVec
	rateRefused *prometheus.CounterVec
	ratePace    *prometheus.GaugeVec
}

// New registers the collectors on reg. db is read at scrape time for the
// task and queue gauges; logger (optional) reports scrape query failures.
func New(reg *prometheus.Registry, db agentsql.DBTX, logger *slog.Logger) (*Metrics, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: reg,
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentworker_run_duration_seconds", Help: "Duration of task runs (one River attempt), by task type and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2.5, 12),
		}, []string{"type", "outcome"}),
		llmLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentworker_llm_request_duration_seconds", Help: "Latency of LLM calls, by model.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, []string{"model"}),
		llmTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentworker_llm_tokens_total", Help: "LLM tokens, by model and direction (prompt, completion).",
		}, []string{"model", "direction"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentworker_tool_calls_total", Help: "Tool calls, by tool and outcome (ok, failed).",
		}, []string{"tool", "outcome"}),
		rateWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentworker_llm_rate_limit_wait_seconds_total", Help: "Time model calls waited for the provider's rate limit (pace and Retry-After), by endpoint and model.",
		}, []string{"endpoint", "model"}),
		rateRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentworker_llm_rate_limited_total", Help: "Model requests the provider refused for its rate limit (429, or 503 with Retry-After), by endpoint and model.",
		}, []string{"endpoint", "model"}),
		ratePace: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentworker_llm_pace_requests_per_second", Help: "This process's current pace of model requests, by endpoint and model.",
		}, []string{"endpoint", "model"}),
	}
	cs := []prometheus.Collector{m.runDuration, m.llmLatency, m.llmTokens, m.toolCalls, m.rateWait, m.rateRefused, m.ratePace,
		&dbCollector{db: db, logger: logger}}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// NewProcess returns a registry with the Go and process collectors and
// agentworker's metrics on it.
func NewProcess(db agentsql.DBTX, logger *slog.Logger) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, err
	}
	return New(reg, db, logger)
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveRun records one run of a task.
func (m *Metrics) ObserveRun(taskType string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.runDuration.WithLabelValues(taskType, outcome).Observe(d.Seconds())
}

// Observe implements events.Observer: LLM calls and tool calls are counted
// from the events the loop writes.
func (m *Metrics) Observe(p events.Payload) {
	switch e := p.(type) {
	case events.Log:
		if e.Message != "llm call" {
			return
		}
		model, _ := e.Metadata["model"].(string)
		if d, ok := number(e.Metadata["durationMs"]); ok {
			m.llmLatency.WithLabelValues(model).Observe(d / 1000)
		}
		if n, ok := number(e.Metadata["promptTokens"]); ok {
			m.llmTokens.WithLabelValues(model, "prompt").Add(n)
		}
		if n, ok := number(e.Metadata["completionTokens"]); ok {
			m.llmTokens.WithLabelValues(model, "completion").Add(n)
		}
	case events.ToolCall:
		outcome := "ok"
		if !e.Success {
			outcome = "failed"
		}
		m.toolCalls.WithLabelValues(e.ToolName, outcome).Inc()
	}
}

// RateRefused implements llm.RateObserver.
func (m *Metrics) RateRefused(k llm.PaceKey) {
	m.rateRefused.WithLabelValues(k.Endpoint, k.Model).Inc()
}

// RateWaited implements llm.RateObserver.
func (m *Metrics) RateWaited(k llm.PaceKey, d time.Duration) {
	m.rateWait.WithLabelValues(k.Endpoint, k.Model).Add(d.Seconds())
}

// RatePaced implements llm.RateObserver.
func (m *Metrics) RatePaced(k llm.PaceKey, rps float64) {
	m.ratePace.WithLabelValues(k.Endpoint, k.Model).Set(rps)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

var (
	tasksDesc = prometheus.NewDesc("agentworker_tasks", "Tasks in ai_tasks, by status.", []string{"status"}, nil)
	queueDesc = prometheus.NewDesc("agentworker_queue_depth", "River jobs of ai_tasks waiting to run (available, scheduled, retryable).", nil, nil)
)

// dbCollector reads the task and queue gauges from Postgres at scrape time.
type dbCollector struct {
	db     agentsql.DBTX
	logger *slog.Logger
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- queueDesc
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	counts, depth, err := agentsql.TaskGauges(ctx, c.db)
	if err != nil {
		c.logger.WarnContext(ctx, "metrics: read task gauges", slog.String("err", err.Error()))
		return
	}
	for _, st := range agentsql.Statuses {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(depth))
}
