// Package bench measures agentworker against raw River on one machine, in
// one run: pickup latency, throughput, event delivery, storage tools, the
// agent loop's own overhead and worker memory. `agentworker bench` prints
// its Report as a markdown table or JSON.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/tracing"
	"github.com/agentworker/agentworker/worker"
)

// Options configures a run.
type Options struct {
	// AdminURL is a PostgreSQL URL whose role may CREATE DATABASE; every
	// scenario runs in a fresh database created there.
	AdminURL string
	// Store holds the projects of the storage scenarios (MinIO in the
	// reference figures). Defaults to a local directory.
	Store storage.Store
	// StoreName describes Store in the report ("minio", "local").
	StoreName string
	// StorePID is the process serving Store when it runs on this machine
	// (the private MinIO), so that its CPU per task is measured; 0: none.
	StorePID int
	// Binary is the agentworker executable, for the memory scenario, which
	// runs `agentworker serve` as a child process. Empty skips it.
	Binary string
	// Quick runs reduced sizes (CI smoke checks).
	Quick bool
	// Only names the scenarios to run. Defaults to all.
	Only []string
	// InFlightModelDelay is the in-flight scenario's model delay per call.
	// Defaults to 5 s (100 ms with Quick).
	InFlightModelDelay time.Duration
	// RetentionEvents is the size of the retention scenario's full table.
	// Defaults to 10 million (100,000 with Quick).
	RetentionEvents int
	// Concurrency is the worker's WORKER_CONCURRENCY. Defaults to 10.
	Concurrency int
	// ActiveLimit is the worker's WORKER_ACTIVE_LIMIT (zero: its default).
	ActiveLimit int
	// Logger receives progress lines. Defaults to discarding.
	Logger *slog.Logger

	// toolStartDelay is the worker's handlers.Config.ToolStartDelay (zero:
	// its default); the statement count sets it long, so that a tool slowed
	// by a loaded machine does not write its tool_start on its own.
	toolStartDelay time.Duration
	// projectMaxRunning is the worker's WORKER_PROJECT_MAX_RUNNING.
	projectMaxRunning int
	// tracing is the worker's tracing (nil: off).
	tracing *tracing.Telemetry
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Report is the result of a run. Zero values mean "not measured"; Notes
// says why.
type Report struct {
	Machine   string `json:"machine"`
	Quick     bool   `json:"quick"`
	StoreName string `json:"store"`
	// Scenarios names those that ran, in order.
	Scenarios []string `json:"scenarios"`

	LatencyMS      Percentiles `json:"latency_ms"`
	RiverLatencyMS Percentiles `json:"river_latency_ms"`
	LatencyRatio   float64     `json:"latency_ratio"`

	Tasks               int     `json:"throughput_tasks"`
	TasksPerS           float64 `json:"tasks_per_s"`
	RiverJobsPerS       float64 `json:"river_jobs_per_s"`
	RiverSameWritesPerS float64 `json:"river_same_writes_per_s"`
	EventsPerTask       int     `json:"events_per_task"`
	// ThroughputRounds are the alternated rounds TasksPerS and
	// RiverSameWritesPerS are the medians of.
	ThroughputRounds []ThroughputRound `json:"throughput_rounds"`
	// ThroughputCPU is the CPU per task of our run and of River's same
	// writes.
	ThroughputCPU ThroughputCPU `json:"throughput_cpu"`

	EventsWrittenPerS float64     `json:"events_written_per_s"`
	EventReceiptMS    Percentiles `json:"event_receipt_ms"`
	SSEReceiptMS      Percentiles `json:"sse_receipt_ms"`
	EventWriteMS      Percentiles `json:"event_write_ms"`

	ContextBuildMS struct {
		Files200  float64 `json:"files_200"`
		Files2000 float64 `json:"files_2000"`
	} `json:"context_build_ms"`
	ToolCallMS struct {
		Read Percentiles `json:"read"`
		// Search are warm searches: after the first, within the kept
		// listing's max age.
		Search Percentiles `json:"search"`
		// SearchCold is the first search: nothing listed or read yet.
		SearchCold float64 `json:"search_cold"`
		// SearchStale are searches whose kept listing is past its
		// RefreshAfter (each a model turn after the last): answered from
		// it while a background listing refreshes it.
		SearchStale Percentiles `json:"search_stale"`
		// SearchRelisted are searches whose kept listing is past its max
		// age: listed again, files from the cache.
		SearchRelisted Percentiles `json:"search_relisted"`
		Edit           Percentiles `json:"edit"`
	} `json:"tool_call_ms"`

	LoopOverheadMS float64 `json:"loop_overhead_ms"`

	Tracing TracingCost `json:"tracing"`

	InFlight InFlight `json:"in_flight"`
	Steady   Steady   `json:"steady"`
	Replicas Replicas `json:"replicas"`
	Graph    Graph    `json:"graph"`

	ProviderLimit ProviderLimit `json:"provider_limit"`
	Storm         Storm         `json:"storm"`
	Fairness      Fairness      `json:"fairness"`
	Retention     Retention     `json:"retention"`

	RSSMB struct {
		Tasks1   float64 `json:"tasks_1"`
		Tasks10  float64 `json:"tasks_10"`
		Tasks100 float64 `json:"tasks_100"`
	} `json:"rss_mb"`

	Notes []string `json:"notes,omitempty"`
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func withDefaults(opts Options) Options {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts
}

// Run runs every scenario and returns the report.
func Run(ctx context.Context, opts Options) (Report, error) {
	opts = withDefaults(opts)
	if opts.Store == nil {
		dir, err := os.MkdirTemp("", "agentworker-bench-files-")
		if err != nil {
			return Report{}, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		local, err := storage.NewLocal(dir)
		if err != nil {
			return Report{}, err
		}
		opts.Store, opts.StoreName = local, "local"
	}
	r := Report{Machine: machine(), Quick: opts.Quick, StoreName: opts.StoreName}
	steps := []struct {
		name string
		run  func(context.Context, Options, *Report) error
	}{
		{"latency", runLatency},
		{"throughput", runThroughput},
		{"events", runEventDelivery},
		{"storage", runStorage},
		{"loop", runLoopOverhead},
		{"tracing", runTracing},
		{"inflight", runInFlight},
		{"steady", runSteady},
		{"replicas", runReplicas},
		{"provider-limit", runProviderLimit},
		{"storm", runStorm},
		{"fairness", runFairness},
		{"graph", runGraph},
		{"retention", runRetention},
		{"memory", runMemory},
	}
	for _, s := range steps {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, s.name) {
			continue
		}
		start := time.Now()
		opts.Logger.InfoContext(ctx, "bench: "+s.name)
		if err := s.run(ctx, opts, &r); err != nil {
			return r, fmt.Errorf("bench %s: %w", s.name, err)
		}
		r.Scenarios = append(r.Scenarios, s.name)
		opts.Logger.InfoContext(ctx, "bench: "+s.name+" done", slog.Duration("took", time.Since(start)))
	}
	return r, nil
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, runtime.Version())
}

// database is a fresh, migrated database for one scenario.
type database struct {
	url  string
	pool *pgxpool.Pool
	drop func()
}

func newDatabase(ctx context.Context, adminURL string, maxConns int32) (*database, error) {
	return newDatabaseTraced(ctx, adminURL, func(c *pgxpool.Config) { c.MaxConns = maxConns }, nil)
}

// newWorkerDatabase is newDatabase with the pool serve gives a process
// running concurrency tasks; its statements go to tracer, when not nil.
func newWorkerDatabase(ctx context.Context, adminURL string, concurrency int, tracer pgx.QueryTracer) (*database, error) {
	return newDatabaseTraced(ctx, adminURL, func(c *pgxpool.Config) { worker.SizePool(c, concurrency) }, tracer)
}

// newDatabaseTraced is newDatabase whose pool is sized by size and reports
// its statements to tracer, when not nil.
func newDatabaseTraced(ctx context.Context, adminURL string, size func(*pgxpool.Config), tracer pgx.QueryTracer) (*database, error) {
	return newDatabaseWith(ctx, adminURL, size, tracer, agentsql.Migrate)
}

// newDatabaseWith is newDatabaseTraced migrated by migrate.
func newDatabaseWith(ctx context.Context, adminURL string, size func(*pgxpool.Config), tracer pgx.QueryTracer,
	migrate func(context.Context, *pgxpool.Pool) error) (*database, error) {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact.String(adminURL), err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "agentworker_bench_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		admin.Close(ctx)
		return nil, err
	}
	cfg.ConnConfig.Database = name
	size(cfg)
	agentsql.ConfigurePool(cfg)
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = admin.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(dctx)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, err
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		drop()
		return nil, err
	}
	url := cfg.ConnString()
	if u, err := replaceDatabase(adminURL, name); err == nil {
		url = u
	}
	return &database{url: url, pool: pool, drop: func() { pool.Close(); drop() }}, nil
}

func percentiles(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return float64(s[i].Microseconds()) / 1000
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99)}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}
