package bench

import (
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/internal/devenv/proccpu"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// A two-call build's statements and round trips, as handlers'
// TestStatementsPerBuildTask holds them: River's same writes send as many.
const buildStatements, buildRoundTrips = 10, 7

// A two-call build's requests of the project store, as handlers'
// TestStoreRequestsPerBuildTask holds them: River's same writes make them.
const buildStoreRequests = "List 1, Read 1, Stat 1, WriteIf 1"

// TestReplayWritesSendsABuildsStatements: a River job replaying our build
// sends its statements in its round trips, leaves the task succeeded with
// its events, its change set applied and its file written.
func TestReplayWritesSendsABuildsStatements(t *testing.T) {
	t.Parallel()
	var stmts statementCounter
	url := dbtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = &stmts
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	local, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := storagetest.NewCounting(local)
	var id, project uuid.UUID
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
			return err
		}
		return tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES (gen_random_uuid(), 'build', 'replay')
			RETURNING id, project_id`).Scan(&id, &project)
	})
	if err != nil {
		t.Fatal(err)
	}
	groups := []int{3, 2, 4, 3}
	n0, trips0 := stmts.n.Load(), stmts.trips.Load()
	if err := replayWrites(t.Context(), &database{url: url, pool: pool}, store, events.NewAnnouncer(pool, nil), id, 1, groups, []byte(`[{"role":"user","content":"x"}]`)); err != nil {
		t.Fatal(err)
	}
	if n, trips := stmts.n.Load()-n0, stmts.trips.Load()-trips0; n != buildStatements || trips != buildRoundTrips {
		t.Errorf("the replay sent %d statements in %d round trips, a build %d in %d", n, trips, buildStatements, buildRoundTrips)
	}
	if got := store.Take(); got != buildStoreRequests {
		t.Errorf("the replay asked the store for %s, a build for %s", got, buildStoreRequests)
	}
	var status, cs string
	var events int
	if err := pool.QueryRow(t.Context(), `SELECT t.status, s.status, (SELECT count(*) FROM agent_events e WHERE e.task_id = t.id)
		FROM ai_tasks t JOIN change_sets s ON s.task_id = t.id WHERE t.id = $1`, id).Scan(&status, &cs, &events); err != nil {
		t.Fatal(err)
	}
	if status != "succeeded" || cs != "applied" || events != 12 {
		t.Errorf("task %s, change set %s, %d events; want succeeded, applied, 12", status, cs, events)
	}
	if got, _, err := store.Read(t.Context(), project.String(), "out.txt"); err != nil || string(got) != "x\n" {
		t.Errorf("out.txt = %q, %v; want x", got, err)
	}
}

// TestCPUMeterCountsTheStore: the meter gives the store process's CPU and
// the machine's per task, beside this process's and the database's.
func TestCPUMeterCountsTheStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// A stand-in for the store's process: busy until killed.
	busy := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = busy.Process.Kill()
		_ = busy.Wait()
	})
	pid := busy.Process.Pid
	m := startCPU(ctx, &database{pool: pool}, pid)
	start, _ := proccpu.Ticks(pid)
	// However loaded the machine, it gets 20 ticks (200 ms) in time.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if now, _ := proccpu.Ticks(pid); now-start >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy process got under 200 ms of CPU in a minute")
		}
	}
	c := m.perTask(10)
	if c.StoreMS < 20 || c.MachineMS < c.StoreMS {
		t.Errorf("per task of 10 over 200 ms of a busy store: store %.2f ms, machine %.2f ms; want the store ≥ 20 ms, the machine at least the store's", c.StoreMS, c.MachineMS)
	}
	if none := startCPU(ctx, &database{pool: pool}, 0).perTask(10); none.StoreMS != 0 {
		t.Errorf("without a store process: store %.2f ms, want 0", none.StoreMS)
	}
}

// TestMedianRun: each figure of alternated rounds is its own median.
func TestMedianRun(t *testing.T) {
	t.Parallel()
	runs := []throughputRun{
		{perS: 200, cpu: CPUPerTask{ProcessMS: 3, PostgresMS: 4, StoreMS: 2, MachineMS: 10, ModelApart: true}},
		{perS: 150, cpu: CPUPerTask{ProcessMS: 2, PostgresMS: 5, StoreMS: 3, MachineMS: 12, ModelApart: true}},
		{perS: 180, cpu: CPUPerTask{ProcessMS: 4, PostgresMS: 3, StoreMS: 1, MachineMS: 9, ModelApart: true}},
	}
	perS, cpu := medianRun(runs)
	want := CPUPerTask{ProcessMS: 3, PostgresMS: 4, StoreMS: 2, MachineMS: 10, ModelApart: true}
	if perS != 180 || cpu != want {
		t.Errorf("medianRun = %v, %+v; want 180, %+v", perS, cpu, want)
	}
}
