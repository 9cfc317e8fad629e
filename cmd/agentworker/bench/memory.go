package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

// runMemory runs `agentworker serve` as a child process and reads its
// resident memory while 1, 10 and 100 tasks run at once (the scripted model
// holds each LLM call open so the tasks overlap).
func runMemory(ctx context.Context, opts Options, r *Report) error {
	if opts.Binary == "" {
		r.note("memory: skipped (no agentworker binary given)")
		return nil
	}
	slow := scripted.Func(func(req *scripted.Request) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"done"}`}}}
		}
		return scripted.Reply{Delay: 2 * time.Second, ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x\n"}`}}}
	})
	model, err := scripted.ListenLoopback(slow)
	if err != nil {
		return err
	}
	defer func() { _ = model.Close() }()
	for _, n := range []int{1, 10, 100} {
		mb, err := serveRSS(ctx, opts, model.URL, n)
		if err != nil {
			return err
		}
		switch n {
		case 1:
			r.RSSMB.Tasks1 = mb
		case 10:
			r.RSSMB.Tasks10 = mb
		case 100:
			r.RSSMB.Tasks100 = mb
		}
	}
	r.note("memory: peak RSS (VmHWM) of an `agentworker serve` process with WORKER_CONCURRENCY=100")
	return nil
}

func serveRSS(ctx context.Context, opts Options, modelURL string, n int) (float64, error) {
	db, err := newDatabase(ctx, opts.AdminURL, 10)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	dir, err := os.MkdirTemp("", "agentworker-bench-rss-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	cmd, stop, err := startServe(ctx, opts, db, dir, modelURL, 100)
	if err != nil {
		return 0, err
	}
	defer stop()
	// Wait until the worker is up: River registers its client in river_client
	// or the leader table; simplest is to run one task through first.
	for i := range n {
		if _, err := insertTask(ctx, db, fmt.Sprintf("rss %d", i)); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var running, done int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'succeeded') FROM ai_tasks`).Scan(&running, &done); err != nil {
			return 0, err
		}
		if running+done == n && running == n {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d tasks running at once after 60s", running, n)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	return peakRSSMB(cmd.Process.Pid)
}

// peakRSSMB reads VmHWM (peak resident set) of a process.
func peakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", rest, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
