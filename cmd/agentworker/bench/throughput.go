package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"golang.org/x/sys/unix"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/internal/devenv/proccpu"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/worker"
)

// runThroughput measures tasks completed per second from a queue of N
// (instant model, one write_file per task), raw River no-op jobs per second,
// and raw River jobs that make the same database statements as one of our
// tasks: their ratio is the framework's own overhead. It measures the CPU
// per task of our tasks and of River's same statements alike. Ours and
// River's same writes run in alternated rounds (throughputRounds; one
// when quick), each figure the median of its rounds: on a shared machine
// one run of each drifts apart by more than the gap measured.
func runThroughput(ctx context.Context, opts Options, r *Report) error {
	n, rounds := 10000, throughputRounds
	if opts.Quick {
		n, rounds = 1000, 1
	}
	r.Tasks = n
	noop, err := riverThroughput(ctx, opts, n, nil, nil)
	if err != nil {
		return err
	}
	r.RiverJobsPerS = noop.perS
	var ours, same []throughputRun
	for range rounds {
		// Labelled, as is every goroutine each run starts: --cpuprofile's
		// profile splits by run (go tool pprof -tagfocus run=ours).
		var o, sw throughputRun
		pprof.Do(ctx, pprof.Labels("run", "ours"), func(ctx context.Context) {
			o, err = oursThroughput(ctx, opts, n)
		})
		if err != nil {
			return err
		}
		ours = append(ours, o)
		pprof.Do(ctx, pprof.Labels("run", "river_same_writes"), func(ctx context.Context) {
			sw, err = riverThroughput(ctx, opts, n, o.groups, o.conversation)
		})
		if err != nil {
			return err
		}
		same = append(same, sw)
		r.ThroughputRounds = append(r.ThroughputRounds, ThroughputRound{TasksPerS: o.perS, RiverSameWritesPerS: sw.perS})
	}
	for _, g := range ours[0].groups {
		r.EventsPerTask += g
	}
	r.TasksPerS, r.ThroughputCPU.Ours = medianRun(ours)
	r.RiverSameWritesPerS, r.ThroughputCPU.RiverSameWrites = medianRun(same)
	r.note("throughput: %d tasks; a task is 2 LLM calls (HTTP to a loopback scripted model), 1 file write, %d events in %d statements; "+
		"River's same writes: each job sends our build's statements in the same round trips and makes its requests of the project store (a listing, a lookup, a read, a conditional write) and announces its events through an Announcer, without the model and the loop; "+
		"CPU per task: this process (the worker, or River's client) and the database's backends, from getrusage and /proc; %s; "+
		"%d alternated round(s) of ours and River's same writes, each figure the median of its rounds",
		n, r.EventsPerTask, len(ours[0].groups), modelWhere(ours[0].cpu), rounds)
	return nil
}

// throughputRounds is how many alternated rounds a full run makes.
const throughputRounds = 3

// ThroughputRound is one round's tasks per second, ours and River's same
// writes, run one after the other.
type ThroughputRound struct {
	TasksPerS           float64 `json:"tasks_per_s"`
	RiverSameWritesPerS float64 `json:"river_same_writes_per_s"`
}

// medianRun is the median of runs' tasks per second and of each of their
// CPU figures.
func medianRun(runs []throughputRun) (float64, CPUPerTask) {
	field := func(f func(throughputRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, run := range runs {
			xs[i] = f(run)
		}
		return median(xs)
	}
	return field(func(r throughputRun) float64 { return r.perS }), CPUPerTask{
		ProcessMS:  field(func(r throughputRun) float64 { return r.cpu.ProcessMS }),
		PostgresMS: field(func(r throughputRun) float64 { return r.cpu.PostgresMS }),
		ModelMS:    field(func(r throughputRun) float64 { return r.cpu.ModelMS }),
		ModelApart: runs[0].cpu.ModelApart,
		StoreMS:    field(func(r throughputRun) float64 { return r.cpu.StoreMS }),
		MachineMS:  field(func(r throughputRun) float64 { return r.cpu.MachineMS }),
	}
}

// modelWhere says where the throughput run's model ran.
func modelWhere(c CPUPerTask) string {
	if c.ModelApart {
		return "the scripted model runs in a child process, its CPU given apart"
	}
	return "the scripted model runs in this process, its CPU counted as the worker's"
}

// ThroughputCPU is the CPU time per task of the throughput scenario's runs.
type ThroughputCPU struct {
	Ours            CPUPerTask `json:"ours"`
	RiverSameWrites CPUPerTask `json:"river_same_writes"`
}

// CPUPerTask is CPU time per task in milliseconds (user + system): this
// process's (the worker and, in our run, the scripted model it hosts) and
// the database's backends'.
type CPUPerTask struct {
	ProcessMS  float64 `json:"process_ms"`
	PostgresMS float64 `json:"postgres_ms"`
	// ModelMS is the scripted model's, when it ran in a process of its
	// own (ModelApart); else it is part of ProcessMS.
	ModelMS    float64 `json:"model_ms,omitempty"`
	ModelApart bool    `json:"model_apart,omitempty"`
	// StoreMS is the project store's, when it runs on this machine.
	StoreMS float64 `json:"store_ms,omitempty"`
	// MachineMS is the whole machine's busy CPU time per task: what the
	// run cost, whoever spent it.
	MachineMS float64 `json:"machine_ms,omitempty"`
}

// cpuMeter measures the CPU time of this process, of a database's
// backends, of the store's process and of the machine since it started.
type cpuMeter struct {
	self0    time.Duration
	backends *backendCPU
	storePID int // 0: no store process, or its first read failed
	store0   int64
	machine0 float64 // negative: the first read failed
}

func startCPU(ctx context.Context, db *database, storePID int) *cpuMeter {
	m := &cpuMeter{self0: selfCPU(), backends: newBackendCPU(ctx, db), machine0: -1}
	if storePID != 0 {
		if t, ok := proccpu.Ticks(storePID); ok {
			m.storePID, m.store0 = storePID, t
		}
	}
	if busy, _, ok := proccpu.Machine(); ok {
		m.machine0 = busy
	}
	return m
}

// perTask is the CPU time since the start, per task of n.
func (m *cpuMeter) perTask(n int) CPUPerTask {
	m.backends.sample()
	self := selfCPU() - m.self0
	pg := time.Duration(m.backends.total()) * proccpu.Tick
	perTask := func(d time.Duration) float64 { return ratio(float64(d.Microseconds())/1000, float64(n)) }
	c := CPUPerTask{ProcessMS: perTask(self), PostgresMS: perTask(pg)}
	if m.storePID != 0 {
		if t, ok := proccpu.Ticks(m.storePID); ok {
			c.StoreMS = perTask(time.Duration(t-m.store0) * proccpu.Tick)
		}
	}
	if busy, _, ok := proccpu.Machine(); ok && m.machine0 >= 0 {
		c.MachineMS = ratio((busy-m.machine0)*1000, float64(n))
	}
	return c
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// throughputRun is one throughput run's result: tasks per second, CPU per
// task, and for ours how a task's events were written and its conversation.
type throughputRun struct {
	perS         float64
	cpu          CPUPerTask
	groups       []int
	conversation []byte
}

func oursThroughput(ctx context.Context, opts Options, n int) (throughputRun, error) {
	var run throughputRun
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return run, err
	}
	defer db.drop()
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'throughput' FROM generate_series(1, $1)`, n); err != nil {
		return run, fmt.Errorf("queue %d tasks: %w", n, err)
	}
	// The model answers from a child process where the bench has its
	// executable: its CPU is the provider's, measured apart from the
	// worker's. Without one (tests) this process hosts it.
	var (
		p            *pipeline
		child        *modelProcess
		conversation func() []byte
		stopErr      error
	)
	if opts.Binary != "" {
		if child, err = startModelProcess(ctx, opts.Binary); err != nil {
			return run, err
		}
		var recorded []byte
		stop := func() error {
			recorded, stopErr = child.stop()
			return stopErr
		}
		conversation = func() []byte { return recorded }
		p, err = startPipelineAt(ctx, opts, db, child.url, stop, false)
	} else {
		var model scripted.Responder
		model, conversation = recordConversation(instantModel())
		p, err = startPipeline(ctx, opts, db, model, false)
	}
	if err != nil {
		return run, err
	}
	cpu := startCPU(ctx, db, opts.StorePID)
	var model0 time.Duration
	if child != nil {
		model0 = child.cpu()
	}
	t0 := time.Now()
	if err := p.svc.Start(ctx); err != nil {
		p.stop(ctx)
		return run, err
	}
	deadline := time.After(20 * time.Minute)
	for i := 0; i < n; i++ {
		select {
		case <-p.timed.done:
		case <-deadline:
			p.stop(ctx)
			return run, fmt.Errorf("only %d of %d tasks done after 20 minutes", i, n)
		case <-ctx.Done():
			p.stop(ctx)
			return run, ctx.Err()
		}
	}
	elapsed := time.Since(t0)
	run.cpu = cpu.perTask(n)
	if child != nil {
		run.cpu.ModelMS = ratio(float64((child.cpu()-model0).Microseconds())/1000, float64(n))
		run.cpu.ModelApart = true
	}
	p.stop(ctx)
	var ok int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM ai_tasks WHERE status = 'succeeded'").Scan(&ok); err != nil {
		return run, err
	}
	if ok != n {
		return run, fmt.Errorf("%d of %d tasks succeeded", ok, n)
	}
	if run.groups, err = statementGroups(ctx, db); err != nil {
		return run, err
	}
	if stopErr != nil {
		return run, stopErr
	}
	run.perS, run.conversation = float64(n)/elapsed.Seconds(), conversation()
	return run, nil
}

// recordConversation wraps r to keep the messages of the last call that
// answered a tool result, as the checkpoint after the first iteration
// records them; conversation returns them as JSON.
func recordConversation(r scripted.Responder) (scripted.Responder, func() []byte) {
	var last atomic.Pointer[[]llm.Message]
	wrapped := scripted.Func(func(req *scripted.Request) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			last.Store(&req.Messages)
		}
		return r.Respond(req)
	})
	return wrapped, func() []byte {
		m := last.Load()
		if m == nil {
			return []byte(`[]`)
		}
		b, err := json.Marshal(*m)
		if err != nil {
			return []byte(`[]`)
		}
		return b
	}
}

// statementGroups returns how one task's events were written: the number
// of rows of each INSERT, in order (rows of one statement share created_at).
func statementGroups(ctx context.Context, db *database) ([]int, error) {
	rows, err := db.pool.Query(ctx, `SELECT count(*) FROM agent_events
		WHERE task_id = (SELECT id FROM ai_tasks LIMIT 1) GROUP BY created_at ORDER BY min(seq)`)
	if err != nil {
		return nil, fmt.Errorf("read statement groups: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

type sameWritesArgs struct {
	TaskID uuid.UUID `json:"task_id"`
}

func (sameWritesArgs) Kind() string { return "bench_same_writes" }

// riverThroughput works n raw River jobs: no-ops when groups is nil, else
// jobs replaying our build's statements (replayWrites).
func riverThroughput(ctx context.Context, opts Options, n int, groups []int, conversation []byte) (throughputRun, error) {
	var run throughputRun
	db, err := newWorkerDatabase(ctx, opts.AdminURL, opts.Concurrency, nil)
	if err != nil {
		return run, err
	}
	defer db.drop()
	// River's same writes announce their events as our worker does: each
	// committed write hands the task to this process's one Announcer.
	var ann *events.Announcer
	if groups != nil {
		ann = events.NewAnnouncer(db.pool, opts.Logger)
		annCtx, stopAnn := context.WithCancel(ctx)
		announced := make(chan struct{})
		go func() {
			_ = ann.Run(annCtx)
			close(announced)
		}()
		defer func() {
			stopAnn()
			<-announced
		}()
	}
	var done atomic.Int64
	finished := make(chan struct{})
	count := func() {
		if done.Add(1) == int64(n) {
			close(finished)
		}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		count()
		return nil
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[sameWritesArgs]) error {
		if err := replayWrites(ctx, db, opts.Store, ann, job.Args.TaskID, job.ID, groups, conversation); err != nil {
			return err
		}
		count()
		return nil
	}))
	client, err := newRiverClient(db, opts, workers)
	if err != nil {
		return run, err
	}
	var params []river.InsertManyParams
	if groups == nil {
		for i := range n {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: worker.TaskQueue}})
		}
	} else {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
				SELECT gen_random_uuid(), 'build', 'same writes' FROM generate_series(1, $1) RETURNING id`, n)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			for _, id := range ids {
				params = append(params, river.InsertManyParams{Args: sameWritesArgs{TaskID: id}, InsertOpts: &river.InsertOpts{Queue: worker.TaskQueue}})
			}
			return err
		})
		if err != nil {
			return run, fmt.Errorf("queue same-writes tasks: %w", err)
		}
	}
	for start := 0; start < len(params); start += 1000 {
		if _, err := client.InsertMany(ctx, params[start:min(start+1000, len(params))]); err != nil {
			return run, fmt.Errorf("insert river jobs: %w", err)
		}
	}
	cpu := startCPU(ctx, db, opts.StorePID)
	t0 := time.Now()
	if err := client.Start(ctx); err != nil {
		return run, err
	}
	defer stopRiver(ctx, client)
	select {
	case <-finished:
	case <-time.After(20 * time.Minute):
		return run, fmt.Errorf("only %d of %d river jobs done after 20 minutes", done.Load(), n)
	case <-ctx.Done():
		return run, ctx.Err()
	}
	run.perS, run.cpu = float64(n)/time.Since(t0).Seconds(), cpu.perTask(n)
	return run, nil
}

// replayWrites makes the database statements of one of our two-call
// builds, in the same round trips, and its requests of the project store,
// without the LLM calls and the agent loop: the claim (its events, the day
// cap), the context read and listing, the first iteration's events, the
// lookup of the file's base version and the staged write, the checkpoint
// with the iteration's events, the read of what the file holds before the
// apply, the change set marked applying, the file written if still absent,
// then the finish (events, change set, task) in one pipeline.
// Event batches are the holder's, fenced and keyed, as the worker writes
// them, with groups' sizes; conversation is the checkpoint's messages.
func replayWrites(ctx context.Context, db *database, store storage.Store, ann *events.Announcer, taskID uuid.UUID, jobID int64, groups []int, conversation []byte) error {
	payload := []byte(`{"kind":"stage_enter","stage":"bench","timestamp":"2026-01-01T00:00:00Z"}`)
	c, err := agentsql.ClaimAndStart(ctx, db.pool, taskID, jobID, "bench", time.Minute, true, 0)
	if err != nil || !c.Claimed {
		return fmt.Errorf("claim %s (claimed %t): %w", taskID, c.Claimed, err)
	}
	fence := agentsql.Fence{TaskID: taskID, Epoch: c.Task.Fence}
	project := c.Task.ProjectID
	// Each write of events is announced once committed, as a task's
	// Recorder hands it to the process's Announcer.
	ann.Announce(taskID, project)
	batch := func(k int) agentsql.EventBatch {
		evs := make([]agentsql.NewEvent, k)
		for i := range evs {
			evs[i] = agentsql.NewEvent{Type: "progress", Payload: payload}
		}
		return agentsql.EventBatch{TaskID: taskID, ProjectID: project, Fence: &fence.Epoch, Key: uuid.New(), Events: evs,
			Since: c.EventsSince, AfterCommit: true}
	}
	if _, _, err := agentsql.ReadTaskContext(ctx, db.pool, project, taskID); err != nil {
		return err
	}
	if _, err := store.List(ctx, project.String(), ""); err != nil {
		return err
	}
	// The claim wrote the first group, the finish writes the last; the
	// checkpoint's pipeline the one before it, each other one a statement.
	middle := groups[1 : len(groups)-1]
	withCheckpoint := 0
	if len(middle) > 0 {
		middle, withCheckpoint = middle[:len(middle)-1], middle[len(middle)-1]
	}
	for _, k := range middle {
		if _, err := agentsql.InsertEventBatch(ctx, db.pool, batch(k)); err != nil {
			return err
		}
		ann.Announce(taskID, project)
	}
	content := []byte("x\n")
	if _, err := store.Stat(ctx, project.String(), "out.txt"); !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("stat out.txt before its first write: %w", err)
	}
	if err := agentsql.PutChangeEntry(ctx, db.pool, fence, agentsql.ChangeEntry{Path: "out.txt", Op: agentsql.ChangeWrite, Content: content}); err != nil {
		return err
	}
	var p agentsql.Pipeline
	agentsql.QueueEventBatch(&p, batch(withCheckpoint))
	var read agentsql.CheckpointRead
	agentsql.QueueSaveCheckpoint(&p, fence, agentsql.Checkpoint{TaskID: taskID, Attempt: c.Task.Attempt, Iteration: 1,
		Messages: conversation, State: []byte(`{}`)}, agentsql.Spend{}, &read)
	if err := p.Run(ctx, db.pool); err != nil {
		return err
	}
	ann.Announce(taskID, project)
	result := []byte(`{"summary":"wrote out.txt","filesChanged":["out.txt"]}`)
	if _, _, err := store.Read(ctx, project.String(), "out.txt"); !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("read out.txt before the apply: %w", err)
	}
	if err := agentsql.MarkChangeSetApplying(ctx, db.pool, fence, result, []agentsql.Prior{{Path: "out.txt"}}); err != nil {
		return err
	}
	if _, err := store.WriteIf(ctx, project.String(), "out.txt", content, ""); err != nil {
		return err
	}
	p = agentsql.Pipeline{}
	agentsql.QueueEventBatch(&p, batch(groups[len(groups)-1]))
	if err := agentsql.QueueFinishChangeSet(&p, fence, agentsql.ChangeSetApplied, false); err != nil {
		return err
	}
	if err := agentsql.QueueFinishTask(&p, fence, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: result}); err != nil {
		return err
	}
	if err := p.Run(ctx, db.pool); err != nil {
		return err
	}
	ann.Announce(taskID, project)
	return nil
}
