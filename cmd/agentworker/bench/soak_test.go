package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

var (
	soak      = flag.Bool("soak", false, "run the soak test: -soak.tasks tasks across 4 worker processes on one Postgres")
	soakTasks = flag.Int("soak.tasks", 1000, "tasks of the soak test")
)

func TestMain(m *testing.M) { dbtest.Main(m, s3test.LeakOption()) }

// TestSoak runs 1,000 tasks (-soak.tasks) across 4 `agentworker serve`
// processes on one Postgres and one MinIO, and checks that none is lost,
// none ran twice at once, and every task's events are gap-free. Run it with
//
//	go test -run TestSoak -v ./cmd/agentworker/bench/ -soak
func TestSoak(t *testing.T) {
	if !*soak {
		t.Skip("soak test: run with -soak (takes about a minute)")
	}
	const processes = 4
	tasks := *soakTasks
	bin := filepath.Join(t.TempDir(), "agentworker")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build agentworker: %v\n%s", err, out)
	}
	url := dbtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s3 := s3test.Config(t)
	model, err := scripted.ListenLoopback(scripted.Func(func(req *scripted.Request) scripted.Reply {
		delay := time.Duration(rand.IntN(20)) * time.Millisecond // tasks overlap across processes
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"done"}`}}}
		}
		return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x\n"}`}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = model.Close() })

	for i := range processes {
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY=soak",
			"S3_ENDPOINT="+s3.Endpoint, "S3_ACCESS_KEY="+s3.AccessKey, "S3_SECRET_KEY="+s3.SecretKey, "S3_BUCKET="+s3.Bucket,
			"WORKER_CONCURRENCY=10", fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", 0), "LOG_LEVEL=warn")
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", i, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		})
	}

	start := time.Now()
	if _, err := pool.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'soak ' || g FROM generate_series(1, $1) g`, tasks); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every task to end", 5*time.Minute, func() bool {
		var open int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM ai_tasks WHERE status IN ('queued', 'running')").Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
	elapsed := time.Since(start)

	var succeeded, otherStatus, multiRuns, overlapping, gappy, minEvents, maxEvents int
	q := func(sql string, dst ...any) {
		t.Helper()
		if err := pool.QueryRow(t.Context(), sql).Scan(dst...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q("SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status <> 'succeeded') FROM ai_tasks", &succeeded, &otherStatus)
	q("SELECT count(*) FROM (SELECT task_id FROM task_runs GROUP BY task_id HAVING count(*) > 1) x", &multiRuns)
	q(`SELECT count(*) FROM task_runs a JOIN task_runs b ON a.task_id = b.task_id AND a.id < b.id
		AND tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)`, &overlapping)
	q(`SELECT count(*) FROM (SELECT task_id FROM agent_events GROUP BY task_id
		HAVING count(*) <> max(seq) OR min(seq) <> 1 OR count(DISTINCT seq) <> count(*)) x`, &gappy)
	q("SELECT min(n), max(n) FROM (SELECT count(*) n FROM agent_events GROUP BY task_id) x", &minEvents, &maxEvents)
	rows, _ := pool.Query(t.Context(), "SELECT worker_id || ': ' || count(*) FROM task_runs GROUP BY worker_id ORDER BY 1")
	perWorker, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n| measure | value |\n|---|---|\n| tasks | %d |\n| worker processes | %d |\n| wall time | %s (%.0f tasks/s) |\n"+
		"| succeeded | %d |\n| lost or not succeeded | %d |\n| tasks with >1 run | %d |\n| overlapping runs of one task | %d |\n"+
		"| tasks with event gaps/dups | %d |\n| events per task | %d–%d |\n| runs per worker | %s |",
		tasks, processes, elapsed.Round(time.Millisecond), float64(tasks)/elapsed.Seconds(), succeeded, otherStatus,
		multiRuns, overlapping, gappy, minEvents, maxEvents, strings.Join(perWorker, ", "))
	if succeeded != tasks || otherStatus != 0 || overlapping != 0 || gappy != 0 || len(perWorker) != processes {
		t.Fatal("soak invariants violated (table above)")
	}
}
