package worker_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// barrier answers each task's first model call only once n calls wait at
// the same time, and every later call at once with finish.
type barrier struct {
	n       int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (b *barrier) Respond(req *scripted.Request) scripted.Reply {
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" { // a later call of the task
		return llmtest.Text("done")
	}
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return llmtest.Call("finish", map[string]string{"summary": "waited together"})
	case <-time.After(60 * time.Second):
		return llmtest.Error(500, "") // the barrier never filled
	}
}

// A task holds no database connection while it waits for its model: twelve
// tasks on a pool of four connections are all in a model call at once.
// Were a connection held across the call, at most four (fewer, with River's
// own) could wait together, the barrier would never fill, and the tasks
// would fail.
func TestNoConnectionHeldAcrossModelCall(t *testing.T) {
	t.Parallel()
	const tasks = 12
	b := &barrier{n: tasks, all: make(chan struct{})}
	h := setup(t, setupOpts{responder: b, maxConns: 4, concurrency: tasks})
	ids := make([]uuid.UUID, tasks)
	for i := range ids {
		ids[i] = h.insertTask(t, uuid.New(), "chat", "wait with the others")
	}
	select {
	case <-b.all:
	case <-time.After(60 * time.Second):
		b.mu.Lock()
		t.Fatalf("only %d of %d tasks reached their model call together on a pool of 4", b.waiting, tasks)
	}
	for _, id := range ids {
		if _, task := h.waitDone(t, id); task.Status != agentsql.StatusSucceeded {
			t.Errorf("task %s: %s, %s", id, task.Status, task.Error)
		}
	}
}

func TestPoolSizeFollowsConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		concurrency int
		want        int32
	}{{1, 10}, {10, 10}, {200, 20}, {1000, 50}, {100000, 50}} {
		if got := worker.PoolSize(tc.concurrency); got != tc.want {
			t.Errorf("PoolSize(%d) = %d, want %d", tc.concurrency, got, tc.want)
		}
	}
	if c := worker.DefaultConfig().Concurrency; c < 100 {
		t.Errorf("default concurrency %d: an I/O-bound worker should run hundreds", c)
	}
	// Of those, a few per CPU work at once: enough to keep the CPUs busy,
	// few enough that the rest of the process is not kept waiting for one.
	if a, cpus := worker.DefaultConfig().ActiveLimit, runtime.GOMAXPROCS(0); a != worker.DefaultActivePerCPU*cpus || a > 4*cpus {
		t.Errorf("default active limit %d on %d CPUs: want %d per CPU, a few", a, cpus, worker.DefaultActivePerCPU)
	}
}

// A worker's pool opens its connections before the first task needs one,
// so a burst of claims does not wait on Postgres starting backends.
func TestSizePoolKeepsItsConnectionsOpen(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	worker.SizePool(cfg, 1)
	if cfg.MaxConns != worker.PoolSize(1) {
		t.Errorf("MaxConns = %d, want PoolSize(1) = %d", cfg.MaxConns, worker.PoolSize(1))
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	poll.Until(t, "the pool to open its connections", 10*time.Second, func() bool {
		return pool.Stat().IdleConns() == cfg.MaxConns
	})
}

// A task gives up its turn to work while it waits on its model: with one
// turn, three tasks' model calls are in flight at once. Were the turn held
// across the call, the calls would come one after the other.
func TestActiveLimitCountsWorkNotWaits(t *testing.T) {
	t.Parallel()
	const n = 3
	var (
		mu      sync.Mutex
		waiting int
		most    int
	)
	together := make(chan struct{})
	h := setup(t, setupOpts{concurrency: n, workerConfig: worker.Config{ActiveLimit: 1},
		responder: scripted.Func(func(req *scripted.Request) scripted.Reply {
			mu.Lock()
			waiting++
			most = max(most, waiting)
			if waiting == n {
				close(together)
			}
			mu.Unlock()
			select {
			case <-together:
			case <-time.After(10 * time.Second):
			}
			mu.Lock()
			waiting--
			mu.Unlock()
			return llmtest.Text("done")
		})})
	projectID := uuid.New()
	var ids []uuid.UUID
	for range n {
		ids = append(ids, h.insertTask(t, projectID, "chat", "say done"))
	}
	for _, id := range ids {
		if _, task := h.waitDone(t, id); task.Status != agentsql.StatusSucceeded {
			t.Fatalf("task %s: status %s, error %s", id, task.Status, task.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most != n {
		t.Fatalf("at most %d model calls were in flight at once with one turn to work, want %d", most, n)
	}
}
