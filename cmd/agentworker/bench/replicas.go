package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentworker/agentworker/internal/devenv/proccpu"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/worker"
)

// Replicas is throughput by the number of `agentworker serve` processes
// sharing one database, with an instant model.
type Replicas struct {
	Tasks int `json:"tasks"`
	// Files is the file system the serve processes keep project files on:
	// "tmpfs" where the machine has one, else "disk" (see filesRoot).
	Files string       `json:"files"`
	Runs  []ReplicaRun `json:"runs"`
	// Bounded is the same with each process bounded by its own tasks, not
	// by the machine: few tasks each, and a model that takes a while. An
	// instant model's tasks take all the CPUs of a small machine from one
	// process, so more processes there cannot add throughput whatever the
	// database does; bounded, each process adds its own share unless
	// something on a task's path serializes the processes.
	Bounded BoundedReplicas `json:"bounded"`
}

// BoundedReplicas is throughput by replica count with each process
// running Concurrency tasks against a model answering each call after
// ModelDelayMS.
type BoundedReplicas struct {
	Tasks        int          `json:"tasks"`
	Concurrency  int          `json:"concurrency"`
	ModelDelayMS float64      `json:"model_delay_ms"`
	Runs         []ReplicaRun `json:"runs"`
}

// ReplicaRun is one replica count's result. CPU is per task (user +
// system): the serve processes', the database's backends', and this
// process's.
type ReplicaRun struct {
	Replicas int `json:"replicas"`
	// Scaling is tasks/s ÷ (replicas × one process's tasks/s): 1 when
	// every process added as much as the first.
	Scaling float64 `json:"scaling"`
	// The round on processes that already worked a round; Cold is their
	// first, which grows the pools and starts the backends.
	ReplicaRound
	Cold *ReplicaRound `json:"cold,omitempty"`
}

// ReplicaRound is one round of tasks on a set of serve processes.
type ReplicaRound struct {
	TasksPerS            float64 `json:"tasks_per_s"`
	WorkerCPUMSPerTask   float64 `json:"worker_cpu_ms_per_task"`
	PostgresCPUMSPerTask float64 `json:"postgres_cpu_ms_per_task"`
	// BenchCPUMSPerTask is this process's: the scripted model answering
	// the tasks' calls, and the polls. It shares the machine with the
	// tasks, where a real model would not.
	BenchCPUMSPerTask float64 `json:"bench_cpu_ms_per_task"`
	// CommitsPerTask counts the transactions that wrote (see writes).
	CommitsPerTask float64 `json:"commits_per_task"`
}

func runReplicas(ctx context.Context, opts Options, r *Report) error {
	if opts.Binary == "" {
		r.note("replicas: skipped (no agentworker binary given)")
		return nil
	}
	n, counts := 1000, []int{1, 2, 4}
	if opts.Quick {
		n, counts = 60, []int{1, 2}
	}
	model, err := scripted.ListenLoopback(instantModel())
	if err != nil {
		return err
	}
	defer func() { _ = model.Close() }()
	root, files := filesRoot()
	r.Replicas.Tasks, r.Replicas.Files = n, files
	if r.Replicas.Runs, err = replicaSeries(ctx, opts, model.URL, root, counts, worker.DefaultConcurrency, n); err != nil {
		return err
	}
	r.note("replicas: %d build tasks (instant model, 2 calls, 1 file write) inserted in one statement, worked by 1/2/4 `agentworker serve` processes at the default WORKER_CONCURRENCY on one database, project files on %s; the model runs in the bench process; CPU from /proc (serve processes; the database's backends); time from the insert to the last task's finish, by the database's clock", n, files)

	b := &r.Replicas.Bounded
	b.Tasks, b.Concurrency, b.ModelDelayMS = 300, 5, 100
	if opts.Quick {
		b.Tasks, b.Concurrency, b.ModelDelayMS = 40, 4, 20
	}
	slow, err := scripted.ListenLoopback(fixedDelayModel(time.Duration(b.ModelDelayMS) * time.Millisecond))
	if err != nil {
		return err
	}
	defer func() { _ = slow.Close() }()
	if b.Runs, err = replicaSeries(ctx, opts, slow.URL, root, counts, b.Concurrency, b.Tasks); err != nil {
		return fmt.Errorf("bounded: %w", err)
	}
	r.note("replicas, bounded: %d build tasks as above, each process at WORKER_CONCURRENCY=%d against a model answering each call after %.0f ms, so that one process is bounded by its own tasks (at most %.0f/s), not by the machine; scaling is tasks/s ÷ (processes × one process's tasks/s)",
		b.Tasks, b.Concurrency, b.ModelDelayMS, float64(b.Concurrency)/(2*b.ModelDelayMS/1000))
	return nil
}

// replicaSeries runs n tasks on each count of serve processes in turn,
// each process at the given concurrency, and sets each run's scaling
// against the first (one process).
func replicaSeries(ctx context.Context, opts Options, modelURL, root string, counts []int, concurrency, n int) ([]ReplicaRun, error) {
	var runs []ReplicaRun
	for _, k := range counts {
		run, err := replicaRun(ctx, opts, modelURL, root, k, n, concurrency)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", k, err)
		}
		runs = append(runs, run)
	}
	scale(runs)
	return runs, nil
}

// scale sets each run's Scaling against the run of one process.
func scale(runs []ReplicaRun) {
	var one float64
	for _, run := range runs {
		if run.Replicas == 1 {
			one = run.TasksPerS
		}
	}
	for i := range runs {
		runs[i].Scaling = ratio(runs[i].TasksPerS, float64(runs[i].Replicas)*one)
	}
}

func replicaRun(ctx context.Context, opts Options, modelURL, root string, k, n, concurrency int) (ReplicaRun, error) {
	run := ReplicaRun{Replicas: k}
	db, err := newDatabase(ctx, opts.AdminURL, 5)
	if err != nil {
		return run, err
	}
	defer db.drop()
	dir, err := os.MkdirTemp(root, "agentworker-bench-replicas-")
	if err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	var pids []int
	for range k {
		cmd, stop, err := startServe(ctx, opts, db, dir, modelURL, concurrency)
		if err != nil {
			return run, err
		}
		defer stop()
		pids = append(pids, cmd.Process.Pid)
	}
	// Warm-up: one task per replica, so every process is up and connected.
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'warm-up' FROM generate_series(1, $1)`, k); err != nil {
		return run, err
	}
	if err := waitDone(ctx, db, k, time.Minute); err != nil {
		return run, err
	}

	// The first round is cold: every pool grows to its size under the
	// burst, and each new backend fills its catalog caches, plans its
	// statements and maps shared memory. The second, on the same
	// processes, is what a service that has been running does.
	cold, err := replicaRound(ctx, db, pids, k+n, n)
	if err != nil {
		return run, err
	}
	warm, err := replicaRound(ctx, db, pids, k+2*n, n)
	if err != nil {
		return run, err
	}
	run.ReplicaRound, run.Cold = warm, &cold
	return run, nil
}

// filesRoot is where the serve processes keep project files, and its kind:
// a tmpfs (/dev/shm) where the machine has a writable one, else the
// temporary directory on disk. On disk, every task's new directory and
// file go through the kernel's inode allocator, and ext4 without a journal
// skips there every inode freed in the last minutes by any process: after
// an earlier round's cleanup that was 28 % of a serve process's CPU (perf),
// so the figure depended on what the machine deleted before the run.
func filesRoot() (string, string) {
	if writableTmpfs(shm) {
		return shm, "tmpfs"
	}
	return os.TempDir(), "disk"
}

// shm is where Linux mounts its shared-memory tmpfs.
const shm = "/dev/shm"

// writableTmpfs reports whether dir is on a tmpfs this process may write.
func writableTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC && unix.Access(dir, unix.W_OK) == nil
}

// replicaRound inserts n tasks in one statement and waits until they are
// done, measuring throughput and CPU per task. done is how many tasks the
// database then holds in all, every one succeeded.
func replicaRound(ctx context.Context, db *database, pids []int, done, n int) (ReplicaRound, error) {
	var run ReplicaRound
	backends := newBackendCPU(ctx, db)
	worker0, self0 := proccpu.Sum(pids), proccpu.Sum([]int{os.Getpid()})
	writes0, err := writes(ctx, db)
	if err != nil {
		return run, err
	}
	// The round's time is the database's, from the insert's transaction to
	// the last finish's, so polling more or less often changes neither it
	// nor (through the polls' own backend time) the CPU per task much.
	var inserted time.Time
	if err := db.pool.QueryRow(ctx, `WITH t AS (INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'replicas' FROM generate_series(1, $1) RETURNING created_at)
		SELECT min(created_at) FROM t`, n).Scan(&inserted); err != nil {
		return run, fmt.Errorf("queue %d tasks: %w", n, err)
	}
	if err := waitDone(ctx, db, done, 10*time.Minute, backends.sample); err != nil {
		return run, err
	}
	backends.sample()
	workerTicks, selfTicks := proccpu.Sum(pids)-worker0, proccpu.Sum([]int{os.Getpid()})-self0
	var finished time.Time
	if err := db.pool.QueryRow(ctx, `SELECT max(finished_at) FROM ai_tasks`).Scan(&finished); err != nil {
		return run, err
	}
	writes1, err := writes(ctx, db)
	if err != nil {
		return run, err
	}
	msPerTick := float64(proccpu.Tick.Milliseconds())
	run.TasksPerS = ratio(float64(n), finished.Sub(inserted).Seconds())
	run.WorkerCPUMSPerTask = ratio(float64(workerTicks)*msPerTick, float64(n))
	run.BenchCPUMSPerTask = ratio(float64(selfTicks)*msPerTick, float64(n))
	run.PostgresCPUMSPerTask = ratio(float64(backends.total())*msPerTick, float64(n))
	run.CommitsPerTask = ratio(float64(writes1-writes0), float64(n))
	return run, nil
}

// A round that did not end well.
var (
	errRoundUnfinished = errors.New("tasks still queued or running")
	errRoundFailed     = errors.New("not every task succeeded")
)

// waitDone polls until no task is queued or running, calling each tick
// function at every poll, then requires want tasks, all succeeded. A poll
// reads the two partial indexes of queued and running tasks, not the
// table: its backend's time counts as the database's.
func waitDone(ctx context.Context, db *database, want int, limit time.Duration, each ...func()) error {
	deadline := time.Now().Add(limit)
	for {
		var busy bool
		if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ai_tasks WHERE status = 'queued')
			OR EXISTS (SELECT 1 FROM ai_tasks WHERE status = 'running')`).Scan(&busy); err != nil {
			return err
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", limit, errRoundUnfinished)
		}
		for _, f := range each {
			f()
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	var all, succeeded int
	if err := db.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM ai_tasks`).Scan(&all, &succeeded); err != nil {
		return err
	}
	if all != want || succeeded != want {
		return fmt.Errorf("%d of %d tasks succeeded, want %d: %w", succeeded, all, want, errRoundFailed)
	}
	return nil
}

// backendCPU follows the CPU time of a database's backends: those present
// at the start count from their time then, later ones from zero.
type backendCPU struct {
	ctx        context.Context
	db         *database
	first, cur map[int]int64
}

func newBackendCPU(ctx context.Context, db *database) *backendCPU {
	b := &backendCPU{ctx: ctx, db: db, first: map[int]int64{}, cur: map[int]int64{}}
	for _, pid := range b.pids() {
		t, _ := proccpu.Ticks(pid)
		b.first[pid], b.cur[pid] = t, t
	}
	return b
}

func (b *backendCPU) pids() []int {
	rows, err := b.db.pool.Query(b.ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			out = append(out, pid)
		}
	}
	return out
}

func (b *backendCPU) sample() {
	for _, pid := range b.pids() {
		if t, ok := proccpu.Ticks(pid); ok {
			b.cur[pid] = t
		}
	}
}

func (b *backendCPU) total() int64 {
	var sum int64
	for pid, t := range b.cur {
		sum += t - b.first[pid]
	}
	return sum
}

// startServe starts `agentworker serve` on db, with the project files in
// dir and the scripted model at modelURL; stop ends it (SIGTERM, wait).
func startServe(ctx context.Context, opts Options, db *database, dir, modelURL string, concurrency int) (*exec.Cmd, func(), error) {
	cmd := exec.CommandContext(ctx, opts.Binary, "serve")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+db.url, "STORAGE_DIR="+dir, "OPENAI_BASE_URL="+modelURL, "OPENAI_API_KEY=bench",
		"LLM_MODEL=bench", "LLM_PRICES=bench=0:0", "HTTP_ADDR=127.0.0.1:0", "LOG_LEVEL=error", "S3_ENDPOINT=",
		"WORKER_CONCURRENCY="+strconv.Itoa(concurrency))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s serve: %w", opts.Binary, err)
	}
	return cmd, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}, nil
}
