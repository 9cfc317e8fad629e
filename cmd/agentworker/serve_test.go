package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

// binary builds agentworker once per test process.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "agentworker-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "agentworker")
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return path, nil
})

type procEnv struct {
	dbURL string
	s3    storage.S3Config
	llm   *llmtest.Server
	pool  *pgxpool.Pool
	// env is added to the environment of every process started.
	env []string
}

// newProcEnv is a database, a bucket and, unless replies is nil, a
// scripted model; without one, serve runs on its bundled demo model.
func newProcEnv(t *testing.T, replies ...scripted.Reply) *procEnv {
	t.Helper()
	e := &procEnv{dbURL: dbtest.NewURL(t), s3: s3test.Config(t)}
	if replies != nil {
		e.llm = llmtest.New(t, replies...)
	}
	var err error
	if e.pool, err = pgxpool.New(t.Context(), e.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	return e
}

type proc struct {
	cmd     *exec.Cmd
	out     *logtest.Buffer
	exited  chan struct{} // closed when the process has exited
	waitErr error         // its exit status, once exited is closed
}

// start runs `agentworker serve` against the test's services.
func (e *procEnv) start(t *testing.T, lease time.Duration) *proc {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "LLM_MODEL=")
	})
	cmd.Env = append(cmd.Env,
		"DATABASE_URL="+e.dbURL,
		"S3_ENDPOINT="+e.s3.Endpoint, "S3_ACCESS_KEY="+e.s3.AccessKey, "S3_SECRET_KEY="+e.s3.SecretKey,
		"S3_BUCKET="+e.s3.Bucket, fmt.Sprintf("S3_USE_SSL=%v", e.s3.UseSSL),
		"HTTP_ADDR=127.0.0.1:0", "TASK_LEASE="+lease.String(), "WORKER_CONCURRENCY=2", "LOG_LEVEL=info",
		// The tests count a project's files; tasks.md has tests of its own.
		"TASKS_MD_PATH=",
	)
	if e.llm != nil {
		cmd.Env = append(cmd.Env, "OPENAI_BASE_URL="+e.llm.URL(), "OPENAI_API_KEY=sk-test-not-a-real-key-000000", "LLM_MODEL="+llmtest.Model,
			"LLM_PRICES="+llmtest.Model+"=0:0")
	}
	// Last, so that a test's own setting wins (the last of a name holds).
	cmd.Env = append(cmd.Env, e.env...)
	p := &proc{cmd: cmd, out: &logtest.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("agentworker serve (pid %d) output:\n%s", cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

func (e *procEnv) insert(t *testing.T, prompt string) (uuid.UUID, uuid.UUID) {
	t.Helper()
	projectID := uuid.New()
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: projectID, Type: "build", Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	return task.ID, projectID
}

func (e *procEnv) task(t *testing.T, id uuid.UUID) agentsql.Task {
	t.Helper()
	task, err := agentsql.GetTask(t.Context(), e.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func (e *procEnv) runs(t *testing.T, id uuid.UUID) string {
	t.Helper()
	rows, _ := e.pool.Query(t.Context(), "SELECT status || '@' || worker_id FROM task_runs WHERE task_id = $1 ORDER BY attempt", id)
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(runs, ",")
}

// TestSIGKILLTakeover kills a serving process with SIGKILL in the middle of
// a build, after two finished iterations and while the model works on the
// third; a second process takes the task over once the lease lapses and
// continues from the checkpoint: the finished iterations' model calls are
// not made again, and the project gets each file once.
func TestSIGKILLTakeover(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	e := newProcEnv(t,
		llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a\n"}),
		llmtest.Call("write_file", map[string]string{"path": "b.txt", "content": "b\n"}),
		scripted.Reply{Delay: time.Minute, Content: "the killed process never gets this"},
		llmtest.Call("write_file", map[string]string{"path": "c.txt", "content": "c\n"}),
		llmtest.Call("finish", map[string]string{"summary": "wrote a, b and c"}),
	)
	first := e.start(t, lease)
	id, projectID := e.insert(t, "write a.txt, b.txt and c.txt")
	poll.Until(t, "the first process's third model call", 30*time.Second, func() bool { return len(e.llm.Requests()) == 3 })
	var checkpointed int
	if err := e.pool.QueryRow(t.Context(), `SELECT iteration FROM task_checkpoints WHERE task_id = $1`, id).Scan(&checkpointed); err != nil || checkpointed != 2 {
		t.Fatalf("checkpoint before the kill: iteration %d, %v; want 2", checkpointed, err)
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-first.exited
	second := e.start(t, lease)
	poll.Until(t, "the task to finish on the second process", 60*time.Second, func() bool {
		return e.task(t, id).Status.Terminal()
	})
	task := e.task(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	var taken time.Time
	if err := e.pool.QueryRow(t.Context(), `SELECT started_at FROM task_runs WHERE task_id = $1 AND attempt = 2`, id).Scan(&taken); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL → second process claimed the task: %s (lease %s; includes its start-up)", taken.Sub(killed), lease)
	if d := taken.Sub(killed); d > lease+5*time.Second {
		t.Errorf("takeover took %s, want within lease + 5 s", d)
	}
	runs := e.runs(t, id)
	wantFirst := fmt.Sprintf("-%d", first.cmd.Process.Pid)
	wantSecond := fmt.Sprintf("-%d", second.cmd.Process.Pid)
	if parts := strings.Split(runs, ","); len(parts) != 2 || !strings.HasPrefix(parts[0], "interrupted@") || !strings.HasSuffix(parts[0], wantFirst) ||
		!strings.HasPrefix(parts[1], "succeeded@") || !strings.HasSuffix(parts[1], wantSecond) {
		t.Errorf("runs = %s, want interrupted on pid %d then succeeded on pid %d", runs, first.cmd.Process.Pid, second.cmd.Process.Pid)
	}
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	files, err := store.List(t.Context(), projectID.String(), "")
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if err != nil || strings.Join(paths, ",") != "a.txt,b.txt,c.txt" {
		t.Errorf("project files = %v, %v; want a.txt, b.txt and c.txt once each", paths, err)
	}
	// Two calls finished on the first process, one was lost with it (its
	// reply never came), and the second process asked that one again and
	// the last: 5 calls, none for a finished iteration.
	reqs := e.llm.Requests()
	if len(reqs) != 5 {
		t.Fatalf("model calls = %d, want 5", len(reqs))
	}
	sizes := make([]int, len(reqs))
	for i, r := range reqs {
		sizes[i] = len(r.Messages)
	}
	if sizes[3] != sizes[2] || sizes[1] <= sizes[0] || sizes[2] <= sizes[1] || sizes[4] <= sizes[3] {
		t.Errorf("conversation sizes of the calls = %v: the takeover should resend only the lost call", sizes)
	}
	var starts int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM agent_events WHERE task_id = $1 AND type = 'progress'
		AND payload ->> 'kind' = 'iteration_start'`, id).Scan(&starts); err != nil || starts != 5 {
		t.Errorf("iteration_start events = %d, %v; want 5: 1, 2 and 3 on the first process, 3 and 4 on the second", starts, err)
	}
	var tokensIn int64
	if err := e.pool.QueryRow(t.Context(), `SELECT tokens_in FROM task_runs WHERE task_id = $1 AND attempt = 1`, id).Scan(&tokensIn); err != nil || tokensIn == 0 {
		t.Errorf("the killed run's checkpointed usage: %d tokens in, %v", tokensIn, err)
	}
	t.Logf("killed: pid %d after 2 finished iterations, mid-call 3; lost: that one in-flight call (re-asked); calls made %d, message counts %v",
		first.cmd.Process.Pid, len(reqs), sizes)
}

// TestSIGTERMDrain sends SIGTERM while a task runs: the process stops taking
// work, lets the task finish, and exits cleanly; nothing is lost.
func TestSIGTERMDrain(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t,
		scripted.Reply{Delay: 1500 * time.Millisecond, ToolCalls: llmtest.Call("write_file", map[string]string{"path": "d.txt", "content": "d\n"}).ToolCalls},
		llmtest.Call("finish", map[string]string{"summary": "wrote d.txt"}),
	)
	p := e.start(t, 30*time.Second)
	id, _ := e.insert(t, "write d.txt")
	poll.Until(t, "the model call", 30*time.Second, func() bool { return len(e.llm.Requests()) == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	// A task inserted once the drain began is not taken by the draining
	// process. (Inserted right after the signal, it raced the signal's
	// handling: on a loaded machine the process fetched it first.)
	poll.Until(t, "the drain to begin", 30*time.Second, func() bool { return strings.Contains(p.out.String(), "shutting down") })
	late, _ := e.insert(t, "inserted during the drain")
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Fatalf("serve exited with %v", p.waitErr)
		}
	case <-ctx.Done():
		t.Fatal("serve did not exit after SIGTERM")
	}
	t.Logf("SIGTERM → exit after draining: %s", time.Since(signalled))
	task := e.task(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status after drain = %s, error %s", task.Status, task.Error)
	}
	if runs := e.runs(t, id); !strings.HasPrefix(runs, "succeeded@") || strings.Contains(runs, ",") {
		t.Errorf("runs = %s, want one succeeded run", runs)
	}
	if st := e.task(t, late).Status; st != agentsql.StatusQueued {
		t.Errorf("late task = %s, want still queued for another replica", st)
	}
	if !strings.Contains(p.out.String(), "shutting down") {
		t.Errorf("no shutdown log line")
	}
	if strings.Contains(p.out.String(), "sk-test-not-a-real-key-000000") {
		t.Error("the API key appeared in the logs")
	}
}

// TestSIGSTOPStaleHolder freezes a serving process (SIGSTOP: a VM pause, a
// long GC) in the middle of a build, past its lease. A second process takes
// the task over and continues from the checkpoint; the first is woken
// (SIGCONT) while the second is still working, with a model reply waiting
// in its socket. The stale holder writes nothing more — no event, no
// change-set entry, no file, no discard of the live change set — and the
// task succeeds once: every file lands once, the timeline has no gap and
// nothing after its terminal event, and exactly one run succeeded.
func TestSIGSTOPStaleHolder(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	e := newProcEnv(t,
		llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "a\n"}),
		llmtest.Call("write_file", map[string]string{"path": "b.txt", "content": "b\n"}),
		// Answered while the first process is frozen: it finds this reply
		// when it wakes up, and must not act on it. Its file is one the new
		// holder never writes, so a stale write could not hide under a
		// later one.
		scripted.Reply{Delay: 500 * time.Millisecond, ToolCalls: llmtest.Call("write_file", map[string]string{"path": "stale.txt", "content": "stale\n"}).ToolCalls},
		scripted.Reply{Delay: 3 * time.Second, ToolCalls: llmtest.Call("write_file", map[string]string{"path": "c.txt", "content": "c\n"}).ToolCalls},
		llmtest.Call("finish", map[string]string{"summary": "wrote a, b and c"}),
	)
	first := e.start(t, lease)
	id, projectID := e.insert(t, "write a.txt, b.txt and c.txt")
	poll.Until(t, "the first process's third model call", 30*time.Second, func() bool { return len(e.llm.Requests()) == 3 })
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = first.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	second := e.start(t, lease)
	// Wake the stale holder while the new one waits on its model call.
	poll.Until(t, "the second process's model call", 30*time.Second, func() bool { return len(e.llm.Requests()) == 4 })
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	poll.Until(t, "the stale holder to give the task up", 30*time.Second, func() bool {
		return strings.Contains(first.out.String(), "dropping this attempt")
	})
	poll.Until(t, "the task to finish", 60*time.Second, func() bool { return e.task(t, id).Status.Terminal() })
	task := e.task(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	runs := e.runs(t, id)
	if parts := strings.Split(runs, ","); len(parts) != 2 || !strings.HasPrefix(parts[0], "interrupted@") ||
		!strings.HasPrefix(parts[1], "succeeded@") || !strings.HasSuffix(parts[1], fmt.Sprintf("-%d", second.cmd.Process.Pid)) {
		t.Errorf("runs = %s, want the frozen one interrupted, then one succeeded on pid %d", runs, second.cmd.Process.Pid)
	}
	checkInvariants(t, e.pool, id)
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for p, want := range map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"} {
		got, _, err := store.Read(t.Context(), projectID.String(), p)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	files, err := store.List(t.Context(), projectID.String(), "")
	if err != nil || len(files) != 3 {
		t.Errorf("project files = %v, %v; want a.txt, b.txt and c.txt", files, err)
	}
	// The stale reply was never acted on: stale.txt is in no event, no
	// change-set entry and not in storage.
	var staleEvents, staleEntries int
	if err := e.pool.QueryRow(t.Context(), `SELECT
			(SELECT count(*) FROM agent_events WHERE task_id = $1 AND payload::text LIKE '%stale.txt%' AND type <> 'progress'),
			(SELECT count(*) FROM change_set_entries WHERE task_id = $1 AND path = 'stale.txt')`, id).Scan(&staleEvents, &staleEntries); err != nil ||
		staleEvents != 0 || staleEntries != 0 {
		t.Errorf("the stale holder's write left %d events and %d change-set entries (%v); want none", staleEvents, staleEntries, err)
	}
	if _, _, err := store.Read(t.Context(), projectID.String(), "stale.txt"); err == nil {
		t.Error("stale.txt, the stale holder's write, is in the project")
	}
	select {
	case <-first.exited:
		t.Errorf("the stale holder exited: %v", first.waitErr)
	default:
	}
}

// TestServeWithoutModelKey starts serve with neither OPENAI_API_KEY nor
// OPENAI_BASE_URL, as docker compose does by default: it says it uses the
// bundled scripted model, and a build finishes on it.
func TestServeWithoutModelKey(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.env = append(e.env, "TASKS_MD_PATH=tasks.md")
	p := e.start(t, 30*time.Second)
	id, projectID := e.insert(t, "create hello.txt saying hi")
	poll.Until(t, "the build to end", 60*time.Second, func() bool { return e.task(t, id).Status.Terminal() })
	if task := e.task(t, id); task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if !strings.Contains(p.out.String(), "using the bundled scripted demo model") {
		t.Errorf("serve did not say it uses the scripted model:\n%s", p.out.String())
	}
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if data, _, err := store.Read(t.Context(), projectID.String(), "hello.txt"); err != nil || string(data) != "hi\n" {
		t.Errorf("hello.txt = %q, %v; want \"hi\\n\"", data, err)
	}
	// serve keeps the project's task list.
	poll.Until(t, "tasks.md to list the build as succeeded", 30*time.Second, func() bool {
		md, _, err := store.Read(t.Context(), projectID.String(), "tasks.md")
		return err == nil && strings.Contains(string(md), "| succeeded | 1 |") && strings.Contains(string(md), id.String()[:8])
	})
}
