package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/cmd/agentworker/bench"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

// TestBenchQuickSmoke runs `agentworker bench --quick --json`, the CI smoke
// check of the benchmark: every figure is measured (non-zero). Speed
// targets are not asserted here: they are the benchmark's to report.
func TestBenchQuickSmoke(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	s3 := s3test.Config(t)
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	cmd := exec.CommandContext(ctx, bin, "bench", "--quick", "--json", "--cpuprofile", profile)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbtest.NewURL(t), "S3_ENDPOINT="+s3.Endpoint, "S3_ACCESS_KEY="+s3.AccessKey,
		"S3_SECRET_KEY="+s3.SecretKey, "S3_BUCKET="+s3.Bucket, "LOG_LEVEL=error", "OPENAI_BASE_URL=", "OPENAI_API_KEY=")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	var r bench.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	for name, v := range map[string]float64{
		"latency_ms.p50": r.LatencyMS.P50, "river_latency_ms.p50": r.RiverLatencyMS.P50,
		"tasks_per_s": r.TasksPerS, "river_jobs_per_s": r.RiverJobsPerS, "river_same_writes_per_s": r.RiverSameWritesPerS,
		"throughput_cpu.ours.process_ms": r.ThroughputCPU.Ours.ProcessMS, "throughput_cpu.ours.model_ms": r.ThroughputCPU.Ours.ModelMS,
		"throughput_cpu.ours.machine_ms": r.ThroughputCPU.Ours.MachineMS, "throughput_cpu.river_same_writes.machine_ms": r.ThroughputCPU.RiverSameWrites.MachineMS,
		"event_receipt_ms.p99": r.EventReceiptMS.P99, "sse_receipt_ms.p99": r.SSEReceiptMS.P99, "event_write_ms.p99": r.EventWriteMS.P99,
		"context_build_ms.files_200": r.ContextBuildMS.Files200, "context_build_ms.files_2000": r.ContextBuildMS.Files2000,
		"tool_call_ms.read.p50": r.ToolCallMS.Read.P50, "tool_call_ms.search.p50": r.ToolCallMS.Search.P50, "tool_call_ms.search_cold": r.ToolCallMS.SearchCold, "tool_call_ms.search_stale.p50": r.ToolCallMS.SearchStale.P50,
		"tool_call_ms.edit.p50": r.ToolCallMS.Edit.P50, "loop_overhead_ms": r.LoopOverheadMS,
		"tracing.loop_off_ms": r.Tracing.LoopOffMS, "tracing.loop_on_ms": r.Tracing.LoopOnMS,
		"tracing.tasks_per_s_off": r.Tracing.TasksPerSOff, "tracing.tasks_per_s_on": r.Tracing.TasksPerSOn,
		"in_flight.median_ratio": r.InFlight.MedianRatio, "in_flight.statements_per_task": r.InFlight.StatementsPerTask,
		"in_flight.commits_per_task": r.InFlight.CommitsPerTask, "in_flight.round_trips_per_task": r.InFlight.RoundTripsPerTask, "in_flight.event_receipt_ms.p99": r.InFlight.EventReceiptMS.P99,
		"steady.events_per_s": r.Steady.EventsPerS, "steady.in_flight_median": float64(r.Steady.InFlightMedian),
		"steady.cpu_busy": r.Steady.CPUBusy, "steady.event_receipt_ms.p99": r.Steady.EventReceiptMS.P99,
		"rss_mb.tasks_1": r.RSSMB.Tasks1, "rss_mb.tasks_10": r.RSSMB.Tasks10, "rss_mb.tasks_100": r.RSSMB.Tasks100,
		"graph.handoff_ms.p50": r.Graph.HandoffMS.P50, "graph.pickup_ms.p50": r.Graph.PickupMS.P50, "graph.handoff_ratio": r.Graph.HandoffRatio,
		"graph.tasks_per_s": r.Graph.TasksPerS, "graph.flat_tasks_per_s": r.Graph.FlatTasksPerS,
		"graph.diamond_handoff_ms.p50": r.Graph.DiamondHandoffMS.P50, "graph.fan_in_handoff_ms.p50": r.Graph.FanInHandoffMS.P50,
		"graph.fan_in_handoff_ms.p99": r.Graph.FanInHandoffMS.P99, "graph.diamond_tasks_per_s": r.Graph.DiamondTasksPerS,
		"retention.full.insert_ms.p50": r.Retention.Full.InsertMS.P50, "retention.full.stream_read_ms.p50": r.Retention.Full.StreamReadMS.P50,
		"retention.full.task_list_ms.p50": r.Retention.Full.TaskListMS.P50, "retention.empty.stream_read_ms.p50": r.Retention.Empty.StreamReadMS.P50,
		"retention.unpartitioned_full.stream_read_ms.p50": r.Retention.UnpartitionedFull.StreamReadMS.P50,
		"retention.drop_day_ms":                           r.Retention.DropDayMS,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want a measured figure", name, v)
		}
	}
	if len(r.ThroughputRounds) != 1 || r.ThroughputRounds[0].TasksPerS != r.TasksPerS {
		t.Errorf("throughput rounds %+v, want the quick run's one round of %v tasks/s", r.ThroughputRounds, r.TasksPerS)
	}
	for name, runs := range map[string][]bench.ReplicaRun{"replicas": r.Replicas.Runs, "replicas.bounded": r.Replicas.Bounded.Runs} {
		if len(runs) != 2 {
			t.Fatalf("%s = %+v, want two runs", name, runs)
		}
		for _, run := range runs {
			// Each run measures a warm round and reports its cold one beside it.
			if run.TasksPerS <= 0 || run.PostgresCPUMSPerTask <= 0 || run.CommitsPerTask <= 0 || run.Scaling <= 0 ||
				run.Cold == nil || run.Cold.TasksPerS <= 0 || run.Cold.PostgresCPUMSPerTask <= 0 {
				t.Errorf("%s run = %+v (cold %+v), want both rounds measured and scaled", name, run, run.Cold)
			}
		}
	}
	// The bench process's own CPU (the model, the polls) is a few ticks a
	// round at quick sizes: measured over all the rounds.
	var benchCPU float64
	for _, run := range r.Replicas.Runs {
		benchCPU += run.BenchCPUMSPerTask
		if run.Cold != nil {
			benchCPU += run.Cold.BenchCPUMSPerTask
		}
	}
	if benchCPU <= 0 {
		t.Errorf("replicas: no CPU of the bench process measured in %+v", r.Replicas.Runs)
	}
	if runs := r.ProviderLimit.Runs; len(runs) != 4 {
		t.Errorf("provider-limit = %+v, want four runs (1 and 2 processes, with and without headers)", runs)
	}
	for _, run := range r.ProviderLimit.Runs {
		if run.Failed != 0 || run.Answered != r.ProviderLimit.Tasks*r.ProviderLimit.CallsPerTask || run.WallS <= 0 {
			t.Errorf("provider-limit run = %+v, want every task succeeded, every call answered once, the time measured", run)
		}
	}
	// The storm's builds all succeed, and the refusals stay near the
	// storm's own share: random refusals do not hold the calls back.
	for name, run := range map[string]bench.ProviderLimitRun{"storm.calm": r.Storm.Calm, "storm.storm": r.Storm.Storm} {
		if run.Failed != 0 || run.Answered != r.Storm.Tasks*r.Storm.CallsPerTask || run.Refused > 2*run.Answered || run.WallS <= 0 {
			t.Errorf("%s = %+v, want every task succeeded, every call answered once, refused at most twice that", name, run)
		}
	}
	if runs := r.Fairness.Runs; len(runs) != 2 || runs[0].AlonePerS <= 0 || runs[1].Probes == 0 {
		t.Errorf("fairness = %+v, want two runs (no cap, a cap), the backlog's throughput and the other project's probes measured", runs)
	}
	md := r.Markdown()
	for _, want := range []string{"(first round: ", "bounded by their tasks", "dependent tasks", "requests/s provider", "drop a day", "refused at random", "another project's task"} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown table shows no %q:\n%s", want, md)
		}
	}
	// The throughput scenario labels its runs in the CPU profile, so that
	// -tagfocus run=ours shows the worker alone: a sample's label strings
	// are in the profile's string table.
	if raw, err := readGzip(profile); err != nil {
		t.Errorf("--cpuprofile: %v", err)
	} else {
		for _, label := range []string{"river_same_writes", "ours"} {
			if !bytes.Contains(raw, []byte(label)) {
				t.Errorf("the CPU profile names no %q: the throughput runs are not labelled", label)
			}
		}
	}
	t.Logf("bench --quick: %s", out)
}

// readGzip is a gzipped file's bytes (a pprof profile's protobuf).
func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return io.ReadAll(zr)
}
