package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/agentworker/agentworker/cmd/agentworker/bench"
	"github.com/agentworker/agentworker/internal/devenv/localminio"
	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/agentworker/agentworker/storage"
)

// runBench measures the service against raw River (see package bench).
func runBench(ctx context.Context, cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "reduced sizes, under two minutes")
	retentionEvents := fs.Int("retention-events", 0, "events in the retention scenario's full table (0: 10 million, 100,000 with -quick)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a markdown table")
	only := fs.String("only", "", "comma-separated scenarios to run (latency, throughput, events, storage, loop, tracing, inflight, steady, replicas, provider-limit, storm, fairness, graph, retention, memory); all by default")
	guard := fs.Bool("guard", false, "run the scenarios CI guards (latency, events, inflight) and fail on a regression a user would feel: event receipt p99 over 50 ms, pickup over 2× tuned River's, tasks in flight (1 s model) over 2× the ideal; a run past a limit is tried again, up to 3 runs")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile over the whole run to the file (go tool pprof reads it): where the worker's CPU per task goes")
	serveModel := fs.Bool("serve-instant-model", false, "serve the throughput scenario's instant model on a loopback port until standard input closes, and nothing else: the scenario runs its model in such a child process, so that the model's CPU is not counted as the worker's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serveModel {
		return bench.ServeInstantModel(ctx, os.Stdin, out)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: create the CPU profile %q: %w", *cpuProfile, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: start the CPU profile %q: %w", *cpuProfile, err)
		}
		defer pprof.StopCPUProfile()
	}
	if _, set := os.LookupEnv("LOG_LEVEL"); !set {
		cfg.LogLevel = "warn"
	}
	log := cfg.logger()
	opts := bench.Options{Quick: *quick, Concurrency: cfg.WorkerConcurrency, ActiveLimit: cfg.WorkerActiveLimit, Logger: log}
	opts.RetentionEvents = *retentionEvents
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	if *guard {
		opts.Only, opts.InFlightModelDelay = bench.GuardScenarios, bench.GuardInFlightModelDelay
	}
	if exe, err := os.Executable(); err == nil {
		opts.Binary = exe
	}
	opts.AdminURL = cfg.DatabaseURL
	if opts.AdminURL == "" {
		cluster, err := localpg.Start(ctx, localpg.Config{Logger: log})
		if err != nil {
			return fmt.Errorf("bench: start embedded postgres: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = cluster.Stop(sctx)
		}()
		opts.AdminURL = cluster.URL("postgres")
	}
	store, err := benchStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer store.stop()
	opts.Store, opts.StoreName, opts.StorePID = store.Store, store.name, store.pid

	report, err := bench.Run(ctx, opts)
	if err != nil {
		return err
	}
	// A shared machine has bad moments: a regression is a limit passed in
	// every one of three runs.
	for run := 1; *guard && run < guardRuns && len(bench.Guard(report)) > 0; run++ {
		log.Warn("bench guard: a limit passed; running again", slog.Int("run", run), slog.Any("past", bench.Guard(report)))
		if report, err = bench.Run(ctx, opts); err != nil {
			return err
		}
	}
	if past := bench.Guard(report); *guard && len(past) > 0 {
		_, _ = fmt.Fprint(out, report.Markdown())
		return fmt.Errorf("bench guard: %d runs past the limits: %s", guardRuns, strings.Join(past, "; "))
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	_, err = fmt.Fprint(out, report.Markdown())
	return err
}

// guardRuns is how many runs --guard makes before it calls a limit passed.
const guardRuns = 3

// openedStore is the bench's project store: its name in the report, the
// process serving it when private (0: elsewhere) and how to stop it.
type openedStore struct {
	storage.Store
	name string
	pid  int
	stop func()
}

// benchStore is the configured S3 store, else a private MinIO from the
// local minio binary, else (said in the report) a local directory.
func benchStore(ctx context.Context, cfg config, log *slog.Logger) (openedStore, error) {
	if cfg.S3Endpoint != "" {
		s, err := openStore(ctx, cfg, log)
		return openedStore{Store: s, name: "s3 " + cfg.S3Endpoint, stop: func() {}}, err
	}
	srv, err := localminio.Start(ctx, localminio.Config{Logger: log})
	if errors.Is(err, localminio.ErrNotInstalled) {
		log.Warn("bench: no S3_ENDPOINT and no minio binary; storage figures use a local directory")
		return openedStore{stop: func() {}}, nil
	}
	if err != nil {
		return openedStore{}, fmt.Errorf("bench: start minio: %w", err)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	}
	s3cfg := srv.Config()
	s3cfg.Bucket = "bench"
	s, err := storage.NewS3(ctx, s3cfg)
	if err != nil {
		stop()
		return openedStore{}, err
	}
	return openedStore{Store: s, name: "minio (private, loopback)", pid: srv.Pid(), stop: func() { _ = s.Close(); stop() }}, nil
}
