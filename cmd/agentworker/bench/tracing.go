package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"

	"github.com/agentworker/agentworker/internal/devenv/localjaeger"
	"github.com/agentworker/agentworker/tracing"
)

// TracingCost is the tracing scenario's result: the loop's overhead per
// iteration and the tasks per second with tracing off and on (exporting
// every span and the GenAI metrics over OTLP/HTTP), in alternated rounds
// of one run; the medians, and each round's figures.
type TracingCost struct {
	Receiver       string    `json:"receiver"`
	LoopOffMS      float64   `json:"loop_off_ms"`
	LoopOnMS       float64   `json:"loop_on_ms"`
	LoopRatio      float64   `json:"loop_ratio"`
	TasksPerSOff   float64   `json:"tasks_per_s_off"`
	TasksPerSOn    float64   `json:"tasks_per_s_on"`
	TasksPerSRatio float64   `json:"tasks_per_s_ratio"`
	LoopOffRounds  []float64 `json:"loop_off_rounds_ms"`
	LoopOnRounds   []float64 `json:"loop_on_rounds_ms"`
	TPSOffRounds   []float64 `json:"tasks_per_s_off_rounds"`
	TPSOnRounds    []float64 `json:"tasks_per_s_on_rounds"`
}

// runTracing measures what tracing costs: the loop overhead and the
// throughput scenarios, run with tracing off and on in turn, on-rounds
// exporting to a real receiver (a private Jaeger when its binary is
// installed, else a loopback endpoint that accepts every OTLP/HTTP export
// and drops it).
func runTracing(ctx context.Context, opts Options, r *Report) error {
	const iterations, rounds = 10, 3
	loopTasks, tasks := 20, 2000
	if opts.Quick {
		loopTasks, tasks = 10, 300
	}
	url, name, stop, err := startReceiver(ctx)
	if err != nil {
		return err
	}
	defer stop()
	tel, err := tracing.ForEndpoint(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	c := &r.Tracing
	c.Receiver = name
	for range rounds {
		for _, on := range []bool{false, true} {
			o := opts
			if on {
				o.tracing = tel
			}
			loop, err := loopOverhead(ctx, o, loopTasks, iterations)
			if err != nil {
				return err
			}
			run, err := oursThroughput(ctx, o, tasks)
			if err != nil {
				return err
			}
			tps := run.perS
			if on {
				c.LoopOnRounds, c.TPSOnRounds = append(c.LoopOnRounds, loop), append(c.TPSOnRounds, tps)
			} else {
				c.LoopOffRounds, c.TPSOffRounds = append(c.LoopOffRounds, loop), append(c.TPSOffRounds, tps)
			}
		}
	}
	c.LoopOffMS, c.LoopOnMS = median(c.LoopOffRounds), median(c.LoopOnRounds)
	c.TasksPerSOff, c.TasksPerSOn = median(c.TPSOffRounds), median(c.TPSOnRounds)
	c.LoopRatio, c.TasksPerSRatio = ratio(c.LoopOnMS, c.LoopOffMS), ratio(c.TasksPerSOn, c.TasksPerSOff)
	r.note("tracing: %d rounds of off then on; a round is %d builds × %d tool iterations (loop overhead) and %d builds (throughput); on exports every span and the GenAI metrics to %s",
		rounds, loopTasks, iterations, tasks, name)
	return nil
}

// startReceiver starts the OTLP/HTTP receiver of the tracing scenario and
// returns its base URL and name.
func startReceiver(ctx context.Context) (url, name string, stop func(), err error) {
	bin, err := localjaeger.FindBinary()
	if err == nil {
		dir, err := os.MkdirTemp("", "agentworker-bench-jaeger-")
		if err != nil {
			return "", "", nil, fmt.Errorf("bench: %w", err)
		}
		j, err := localjaeger.Start(ctx, bin, dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", "", nil, err
		}
		return j.OTLPHTTP, "Jaeger (OTLP/HTTP, in-memory store)", func() {
			_ = j.Stop(context.WithoutCancel(ctx))
			_ = os.RemoveAll(dir)
		}, nil
	}
	if !errors.Is(err, localjaeger.ErrNotInstalled) {
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, fmt.Errorf("bench: OTLP receiver: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// An empty ExportTraceServiceResponse: everything accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), "a loopback OTLP/HTTP endpoint that accepts and drops (no jaeger binary)", func() { _ = srv.Close() }, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
