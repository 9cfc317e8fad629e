package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/internal/devenv/localminio"
	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/prereq"
	"github.com/agentworker/agentworker/testing/s3test"
)

// The fault suite: build tasks run on two `serve` processes while a fault
// hits them — a process frozen past its lease or killed, Postgres crashed
// and restarted, MinIO killed and restarted, the model answering 429/500 in
// a storm, MinIO down past the store's retries — and after each, every
// task must have ended with the invariants intact (checkInvariants), each
// succeeded build's file landed once and each failed build left its
// project unchanged. The short version
// runs in CI; -faults.long adds Postgres down for 15 s and more tasks.
var faultsLong = flag.Bool("faults.long", false, "run the long fault suite (Postgres down 15 s, more tasks)")

// faultTasks is how many builds each fault hits.
func faultTasks() int {
	if *faultsLong {
		return 12
	}
	return 4
}

// buildModel scripts every build the same way: write the file the prompt
// names, then finish. Each reply takes delay, so faults land mid-task.
// While storm is above zero, each call is answered with a 500 or a 429; a
// build of a file named poison* gets a 500 for every call. A careless
// model finishes after its write whatever the tool answered: a storage
// outage shown to it as a tool failure would end in a "succeeded" build
// without its file.
type buildModel struct {
	delay    time.Duration
	careless bool
	storm    atomic.Int64
	calls    atomic.Int64
	// beforeReply, when set, runs before a write_file ("write") or finish
	// ("finish") reply is sent: a fault can land exactly before the tool
	// call or the apply that reply leads to.
	beforeReply atomic.Pointer[func(kind string)]
}

func (m *buildModel) before(kind string) {
	if fn := m.beforeReply.Load(); fn != nil {
		(*fn)(kind)
	}
}

func (m *buildModel) Respond(req *scripted.Request) scripted.Reply {
	n := m.calls.Add(1)
	if m.storm.Add(-1) >= 0 {
		if n%2 == 0 {
			return llmtest.Error(http.StatusTooManyRequests, "0")
		}
		return llmtest.Error(http.StatusInternalServerError, "")
	}
	m.storm.Store(0)
	if strings.Contains(req.Messages[min(1, len(req.Messages)-1)].Content, "poison") {
		return llmtest.Error(http.StatusInternalServerError, "")
	}
	// Finish once the write went through; a write that failed (the store
	// was down) is made again, as a model reading the tool error would.
	if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleTool && (m.careless || strings.Contains(last.Content, `"success":true`)) {
		r := llmtest.Call("finish", map[string]string{"summary": "done"})
		r.Delay = m.delay
		m.before("finish")
		return r
	}
	var name string
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleUser && name == "" {
			name = strings.TrimPrefix(msg.Content, "write ")
		}
	}
	r := llmtest.Call("write_file", map[string]string{"path": name, "content": name + "\n"})
	r.Delay = m.delay
	m.before("write")
	return r
}

// faultEnv is two serve processes on their own Postgres and MinIO when a
// fault needs to restart one, else on the test's shared servers.
type faultEnv struct {
	*procEnv
	model *buildModel
	procs []*proc
	tasks []faultTask
	pg    *privatePG
	minio *privateMinio
}

type faultOpts struct {
	privatePG, privateMinio bool
	// careless: the model ignores a failed write (buildModel).
	careless bool
	// env is added to the processes' environment.
	env []string
}

func newFaultEnv(t *testing.T, o faultOpts) *faultEnv {
	t.Helper()
	m := &buildModel{delay: 300 * time.Millisecond, careless: o.careless}
	e := &faultEnv{model: m, procEnv: &procEnv{llm: llmtest.NewWith(t, m), env: o.env}}
	if o.privatePG {
		e.pg = startPrivatePG(t)
		e.dbURL = e.pg.cluster.URL("postgres")
	} else {
		e.dbURL = dbtest.NewURL(t)
	}
	if o.privateMinio {
		e.minio = startPrivateMinio(t)
		e.s3 = e.minio.cfg
	} else {
		e.s3 = s3test.Config(t)
	}
	e.pool = testPool(t, e.dbURL, o.privatePG)
	for range 2 {
		e.procs = append(e.procs, e.start(t, 2*time.Second))
	}
	return e
}

type faultTask struct {
	id      uuid.UUID
	project uuid.UUID
	file    string
}

// submit inserts a build task for each file, each in its own project.
func (e *faultEnv) submit(t *testing.T, files ...string) {
	t.Helper()
	for _, file := range files {
		id, project := e.insert(t, "write "+file)
		e.tasks = append(e.tasks, faultTask{id: id, project: project, file: file})
	}
}

// settle waits until every task ended and checks what must hold.
func (e *faultEnv) settle(t *testing.T) map[agentsql.Status]int {
	t.Helper()
	tasks := e.tasks
	poll.Until(t, "every task to end", 150*time.Second, func() bool {
		var open int
		ids := make([]uuid.UUID, len(tasks))
		for i, tk := range tasks {
			ids[i] = tk.id
		}
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE id = ANY($1)
			AND status NOT IN ('succeeded', 'failed', 'blocked', 'cancelled')`, ids).Scan(&open); err != nil {
			return false // the database may be coming back
		}
		return open == 0
	})
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	outcomes := map[agentsql.Status]int{}
	for _, tk := range tasks {
		task := e.task(t, tk.id)
		outcomes[task.Status]++
		checkInvariants(t, e.pool, tk.id)
		files, err := store.List(t.Context(), tk.project.String(), "")
		if err != nil {
			t.Fatal(err)
		}
		switch task.Status {
		case agentsql.StatusSucceeded:
			got, _, err := store.Read(t.Context(), tk.project.String(), tk.file)
			if err != nil || string(got) != tk.file+"\n" || len(files) != 1 {
				t.Errorf("task %s succeeded: %s = %q, %v; %d files: want its one file, once", tk.id, tk.file, got, err, len(files))
			}
		case agentsql.StatusFailed, agentsql.StatusCancelled:
			var te struct{ Code string }
			if err := json.Unmarshal(task.Error, &te); task.Status == agentsql.StatusFailed && (err != nil || te.Code == "") {
				t.Errorf("task %s failed without a typed error: %s", tk.id, task.Error)
			}
			if len(files) != 0 {
				t.Errorf("task %s %s but changed its project: %d files", tk.id, task.Status, len(files))
			}
		default:
			t.Errorf("task %s ended %s", tk.id, task.Status)
		}
	}
	return outcomes
}

func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite runs real processes for minutes")
	}
	t.Parallel()
	n := faultTasks()
	type fault struct {
		name string
		opts faultOpts
		// hit applies the fault once the tasks are in flight.
		hit  func(t *testing.T, e *faultEnv)
		long bool
	}
	faults := []fault{
		{name: "SIGSTOPPastLease", hit: func(t *testing.T, e *faultEnv) {
			p := e.procs[0]
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }()
			waitFor(t, 4*time.Second) // past the 2 s lease: the other process takes over
		}},
		{name: "SIGKILLAndACancel", hit: func(t *testing.T, e *faultEnv) {
			// A cancel is refused only while the build's files are landing.
			if _, err := agentsql.ControlTask(t.Context(), e.pool, e.tasks[0].id, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "faults"}); err != nil &&
				!errors.Is(err, agentsql.ErrIllegalTransition) {
				t.Fatal(err)
			}
			_ = e.procs[0].cmd.Process.Signal(syscall.SIGKILL)
			<-e.procs[0].exited
			e.procs[0] = e.start(t, 2*time.Second)
		}},
		{name: "PostgresRestartImmediate", opts: faultOpts{privatePG: true}, hit: func(t *testing.T, e *faultEnv) {
			e.pg.crash(t)
			e.pg.restart(t)
		}},
		{name: "PostgresDown15s", opts: faultOpts{privatePG: true}, long: true, hit: func(t *testing.T, e *faultEnv) {
			e.pg.crash(t)
			waitFor(t, 15*time.Second)
			e.pg.restart(t)
		}},
		{name: "MinioKilledAndRestarted", opts: faultOpts{privateMinio: true, careless: true}, hit: func(t *testing.T, e *faultEnv) {
			e.minio.kill(t)
			waitFor(t, 2*time.Second)
			e.minio.restart(t)
		}},
		// MinIO down past the store's 2 s of retries, twice: killed just
		// before a write_file reply is sent (aimed at the write), for 10 s
		// during which more builds are submitted (their context builds meet
		// it), then just before a finish reply (aimed at the checks and the
		// apply), for 5 s. None may tell the model, none may succeed
		// without its file: each hands its task back and a retry finishes
		// it once MinIO is back.
		{name: "MinioDown10s", opts: faultOpts{privateMinio: true, careless: true, env: []string{"S3_RETRY_FOR=2s"}}, hit: func(t *testing.T, e *faultEnv) {
			downBefore := func(kind string) {
				down := make(chan struct{})
				var once sync.Once
				// The kill runs beside the reply, which waits the model's
				// delay: MinIO is gone before the reply lands, and the model
				// call is not held up by the kill.
				hook := func(k string) {
					if k == kind {
						once.Do(func() { go func() { e.minio.kill(t); close(down) }() })
					}
				}
				e.model.beforeReply.Store(&hook)
				if kind == "write" {
					// A new build's first reply is a write, whatever the
					// builds in flight are at.
					e.submit(t, "first.txt")
				}
				select {
				case <-down:
				case <-time.After(60 * time.Second):
					t.Fatalf("no %s reply to land the outage before", kind)
				}
				e.model.beforeReply.Store(nil)
			}
			downBefore("write")
			for i := range n {
				waitFor(t, 10*time.Second/time.Duration(n+1))
				e.submit(t, fmt.Sprintf("late%d.txt", i))
			}
			waitFor(t, 10*time.Second/time.Duration(n+1))
			e.minio.restart(t)
			downBefore("finish")
			waitFor(t, 5*time.Second)
			e.minio.restart(t)
			t.Cleanup(func() {
				// Each hand-back writes a recoverable error event; where the
				// attempt met the outage is in its message.
				rows, err := e.pool.Query(context.Background(), `SELECT phase, count(*) FROM (SELECT CASE
						WHEN payload ->> 'message' LIKE '%project context%' THEN 'context build'
						WHEN payload ->> 'message' LIKE '%apply%' OR payload ->> 'message' LIKE '%roll back%' THEN 'apply'
						WHEN payload ->> 'message' ~ '^[a-z_]+: ' THEN 'tool call'
						ELSE 'elsewhere' END AS phase
					FROM agent_events WHERE type = 'error' AND payload ->> 'errorType' = 'storage_error') x GROUP BY phase ORDER BY phase`)
				if err != nil {
					t.Error(err)
					return
				}
				where := map[string]int{}
				for rows.Next() {
					var phase string
					var count int
					if err := rows.Scan(&phase, &count); err != nil {
						t.Error(err)
					}
					where[phase] = count
				}
				if err := rows.Err(); err != nil {
					t.Error(err)
				}
				t.Logf("attempts handed back by the outages, by where they met them: %v", where)
				// Which phase a build is in when MinIO dies is the timing's; that
				// the outages outlasted the retries and were handed back is not.
				if len(where) == 0 {
					t.Errorf("no attempt was handed back with storage_error: the outages never outlasted the store's retries")
				}
			})
		}},
		{name: "ModelStorm429And500", hit: func(t *testing.T, e *faultEnv) {
			// One build's model fails for good: it must end failed, typed.
			e.submit(t, "poison.txt")
			e.model.storm.Store(int64(3 * n))
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			if f.long && !*faultsLong {
				t.Skip("long fault: run with -faults.long")
			}
			t.Parallel()
			e := newFaultEnv(t, f.opts)
			for i := range n {
				e.submit(t, fmt.Sprintf("f%d.txt", i))
			}
			poll.Until(t, "the tasks in flight", 60*time.Second, func() bool { return e.model.calls.Load() >= int64(n/2) })
			started := time.Now()
			f.hit(t, e)
			outcomes := e.settle(t)
			t.Logf("fault %s × %d tasks → %v (settled %s after the fault; %d model calls)",
				f.name, len(e.tasks), outcomes, time.Since(started).Round(100*time.Millisecond), e.model.calls.Load())
		})
	}
}

// waitFor lets a fault last d: the fault's duration, not a wait for a condition.
func waitFor(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
}

// testPool is a small pool of the test's own on url, closed at its end;
// migrate: the database is a private cluster's, empty until migrated.
func testPool(t *testing.T, url string, migrate bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if migrate {
		if _, err := agentsql.MigrateWithResult(t.Context(), pool, nil); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// privatePG is a Postgres cluster of the test's own, which it may crash.
type privatePG struct {
	dir     string
	port    int
	cluster *localpg.Cluster
}

func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The server runs as the postgres OS user, which must reach its data
	// directory: t.TempDir's parent is private to the test's user.
	parent, err := os.MkdirTemp("", "agentworker-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &privatePG{dir: filepath.Join(parent, "pg"), port: port}
	p.restart(t)
	t.Cleanup(func() { _ = p.cluster.Stop(context.Background()) })
	return p
}

// crash stops the server as `pg_ctl stop -m immediate` does (SIGQUIT to
// the postmaster): no checkpoint, crash recovery at the next start.
func (p *privatePG) crash(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	_ = p.cluster.Stop(t.Context()) // returns once it exited
}

func (p *privatePG) restart(t *testing.T) {
	t.Helper()
	// Durable: a crash must lose no commit a client saw, as a production
	// server's does not.
	c, err := localpg.Start(t.Context(), localpg.Config{Dir: p.dir, Port: p.port, Durable: true})
	if errors.Is(err, localpg.ErrNotInstalled) {
		prereq.MissingFromMachine(t, "the PostgreSQL server (initdb, postgres)", "install the postgresql package", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.cluster = c
}

// privateMinio is a MinIO server of the test's own on a fixed address,
// which it may kill and start again over the same data.
type privateMinio struct {
	bin, dir string
	cfg      storage.S3Config
	cmd      *exec.Cmd
	exited   chan struct{}
}

func startPrivateMinio(t *testing.T) *privateMinio {
	t.Helper()
	bin, err := localminio.FindBinary()
	if errors.Is(err, localminio.ErrNotInstalled) {
		prereq.Missing(t, "MinIO", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	m := &privateMinio{bin: bin, dir: t.TempDir(), cfg: storage.S3Config{Endpoint: fmt.Sprintf("127.0.0.1:%d", port),
		AccessKey: "faults" + uuid.NewString()[:8], SecretKey: uuid.NewString(), Bucket: "faults"}}
	m.restart(t)
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		<-m.exited
	})
	return m
}

func (m *privateMinio) kill(t *testing.T) {
	t.Helper()
	_ = m.cmd.Process.Kill()
	<-m.exited
}

func (m *privateMinio) restart(t *testing.T) {
	t.Helper()
	console, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(m.bin, "server", m.dir, "--address", m.cfg.Endpoint, "--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.cfg.AccessKey, "MINIO_ROOT_PASSWORD="+m.cfg.SecretKey)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(m.exited)
	poll.Until(t, "minio to be live", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + m.cfg.Endpoint + "/minio/health/live")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
