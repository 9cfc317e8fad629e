// Package worker holds the River side of agentworker: the River client, the
// ai_tasks → River job bridge (pickup trigger, Submit, and a reconciler
// backstop run on River's leader), the idempotent claim, dispatch by task
// type, graceful shutdown, and the leader's retention pass (agent_events'
// day partitions made ahead and dropped, old finished tasks deleted).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/internal/gate"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/traceid"
	"github.com/agentworker/agentworker/tracing"
)

// River names. The pickup trigger in sql/migrations uses the same kind and queue.
const (
	TaskKind        = "ai_task"
	TaskQueue       = "ai_tasks"
	MaintenanceKind = "ai_task_reconcile"
	// MaintenanceQueue keeps the reconciler off the task queue's slots.
	MaintenanceQueue = "agentworker_maintenance"
	taskMaxAttempts  = 5
)

// TaskArgs is the River job of one ai_tasks row.
type TaskArgs struct {
	TaskID uuid.UUID `json:"task_id"`
}

// Kind implements river.JobArgs.
func (TaskArgs) Kind() string { return TaskKind }

// Config tunes the worker.
type Config struct {
	// Concurrency is how many tasks this process runs at once. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// ProjectMaxRunning caps the tasks of one project running at once, all
	// replicas together: a task whose project is at the cap when its job
	// starts is snoozed (ProjectCapSnooze, a quarter more at random) and
	// runs once the project is below it, so one project's backlog leaves
	// the other slots to the others. The cap is checked ahead of the
	// claim, not under its lock: replicas starting a project's tasks at
	// the same moment may pass it by a few. Defaults to 0: no cap.
	ProjectMaxRunning int
	// ProjectCapSnooze is how long a task over ProjectMaxRunning waits
	// before it tries again. Defaults to 5 seconds.
	ProjectCapSnooze time.Duration
	// ActiveLimit is how many of those may work at once rather than wait:
	// a task takes a turn to work and gives it up while it waits on its
	// model, a tool or a project check (internal/gate), so when many
	// answers arrive together the first back are the first done instead of
	// all sharing the CPU and finishing late together. Defaults to
	// DefaultActivePerCPU per CPU Go may use (GOMAXPROCS).
	ActiveLimit int
	// FetchCooldown is River's minimum time between fetches. Defaults to 2 ms:
	// River's 100 ms default would put every pickup ~100 ms behind the insert.
	FetchCooldown time.Duration
	// FetchPollInterval is River's fallback poll when no notification
	// arrives. Defaults to 1 second.
	FetchPollInterval time.Duration
	// TaskTimeout bounds one attempt at a task. Defaults to 1 hour.
	TaskTimeout time.Duration
	// ReconcileInterval is how often the leader looks for queued tasks
	// without a job. Defaults to 15 seconds.
	ReconcileInterval time.Duration
	// ReconcileMinAge is how old a queued task must be before the reconciler
	// considers it orphaned. Defaults to 5 seconds.
	ReconcileMinAge time.Duration
	// ClaimTimeout is how long a River job may stay running while its task
	// is still queued (its worker died between fetch and claim) before the
	// reconciler gives the task a new job. Defaults to 30 seconds.
	ClaimTimeout time.Duration
	// Lease is how long a claimed task stays held without its worker
	// renewing it; the worker renews it every Lease/3. A task whose lease
	// lapsed is handed to another replica. Defaults to 30 seconds.
	Lease time.Duration
	// LeaseSweepInterval is how often each replica looks for running tasks
	// whose lease lapsed. Defaults to Lease/6, at most 5 seconds.
	LeaseSweepInterval time.Duration
	// StuckIdleTimeout flags a running task whose timeline has not moved
	// for this long: an alert event and one open inbox item per run. Checked
	// by the leader with the reconciler. Defaults to 10 minutes.
	StuckIdleTimeout time.Duration
	// ProjectMaxCostUSDPerDay is the daily cost cap of a project without
	// its own: the claim reads the day's spend only for a capped project,
	// and the reconciler resumes the tasks paused at their project's cap
	// once the project is under it again (the cap raised, the UTC day
	// turned). Defaults to 0: no cap.
	ProjectMaxCostUSDPerDay float64
	// Announcer, if set, announces the claim's events after it committed,
	// as handlers.Deps.Announcer (the same one) does for the rest of a
	// task's events. Start runs it; Stop stops it after the last task, so
	// the last events are announced. Without it the database's trigger
	// notifies inside each task's transactions.
	Announcer *events.Announcer
	// TasksMD, when its Store and Path are set, keeps each project's task
	// list at Path in its storage, rewritten within about TasksMDInterval of
	// a status change. Defaults to off.
	TasksMD TasksMDConfig
	// TasksMDInterval is how long after events were announced the changed
	// projects' task lists are rendered: the changes of one interval are
	// one render, none when nothing changed. Defaults to 1 second.
	TasksMDInterval time.Duration
	// Retention is what River's leader keeps of finished work, and how it
	// makes agent_events' partitions ahead of time. Defaults to keeping
	// everything (RetentionConfig).
	Retention RetentionConfig
	// ID names this worker in task_runs and logs. Defaults to host-pid.
	ID string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Runs, if set, is told the duration and outcome of every run (metrics).
	Runs interface {
		ObserveRun(taskType string, d time.Duration, err error)
	}
	// Tracing, if set, exports each attempt as an invoke_agent span with
	// its claim, and the spans below it. Defaults to off.
	Tracing *tracing.Telemetry
}

// DefaultConcurrency is how many tasks a process runs at once unless told
// otherwise. A task spends nearly all its life waiting for its model and
// holds no connection meanwhile, so a process runs hundreds; what bounds it
// is the model provider's rate limit, not this machine.
const DefaultConcurrency = 200

// DefaultActivePerCPU is the default ActiveLimit per CPU. A turn covers a
// task's own work between its waits on the model, tools and checks: its
// CPU, its statements, and the storage calls outside tools (the project's
// context, the change set's apply), which on storage beside the service
// are CPU too. A few per CPU keep the CPUs busy; more only make the tasks
// share them, which delays everything else the process and the database
// do: with 1,000 tasks in flight on 2 CPUs, 32 per CPU put the event
// receipt p99 at 141–152 ms and 2 per CPU at 28–39 ms, for the same tasks/s
// and in-flight times (1 per CPU cost 17 % of tasks/s). Storage far away
// (tens of milliseconds a call) wants more turns: raise the limit.
const DefaultActivePerCPU = 2

// PoolSize is the database pool a process running concurrency tasks needs.
// A task holds a connection only for a statement or a short transaction,
// never across a model call, so a few connections serve hundreds of tasks:
// 10 plus one per 20 tasks, at most 50 (more connections than a few per
// core only make Postgres contend; four replicas stay within 200).
func PoolSize(concurrency int) int32 {
	return int32(min(max(10+concurrency/20, 10), 50))
}

// SizePool sizes the pool of a process running concurrency tasks:
// PoolSize connections, all kept open. A burst of tasks would otherwise open
// them just as every task claims at once, when Postgres is busiest, and each
// new backend costs it a fork and a catalog warm-up.
func SizePool(cfg *pgxpool.Config, concurrency int) {
	cfg.MaxConns = PoolSize(concurrency)
	cfg.MinConns = cfg.MaxConns
}

// DefaultConfig returns the configuration New uses for zero fields.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ProjectCapSnooze <= 0 {
		c.ProjectCapSnooze = 5 * time.Second
	}
	if c.ActiveLimit <= 0 {
		c.ActiveLimit = DefaultActivePerCPU * runtime.GOMAXPROCS(0)
	}
	if c.FetchCooldown <= 0 {
		c.FetchCooldown = 2 * time.Millisecond
	}
	if c.FetchPollInterval <= 0 {
		c.FetchPollInterval = time.Second
	}
	if c.TaskTimeout <= 0 {
		c.TaskTimeout = time.Hour
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 15 * time.Second
	}
	if c.ReconcileMinAge <= 0 {
		c.ReconcileMinAge = 5 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = 30 * time.Second
	}
	if c.LeaseSweepInterval <= 0 {
		c.LeaseSweepInterval = min(c.Lease/6, 5*time.Second)
	}
	if c.TasksMDInterval <= 0 {
		c.TasksMDInterval = time.Second
	}
	if c.StuckIdleTimeout <= 0 {
		c.StuckIdleTimeout = 10 * time.Minute
	}
	c.Retention = c.Retention.withDefaults()
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Service runs tasks: a River client with the task and reconcile workers.
type Service struct {
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	handlers map[agentsql.TaskType]handlers.Handler
	cfg      Config
	gate     *gate.Gate // turns to work (Config.ActiveLimit)
	capMu    sync.Mutex // one check and claim at a time under ProjectMaxRunning

	stopping  atomic.Bool   // set by Stop: tasks cut short are handed back
	stopSweep func()        // stops the lease sweeper; set by Start
	swept     chan struct{} // closed when the lease sweeper returned
	stopAnn   func()        // stops the announcer; set by Start
	announced chan struct{} // closed when the announcer returned
	stopMD    func()        // stops the tasks.md scheduler; set by Start
	scheduled chan struct{} // closed when the tasks.md scheduler returned
}

// New builds the service. handlers maps task type to its handler.
func New(pool *pgxpool.Pool, hs map[agentsql.TaskType]handlers.Handler, cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	s := &Service{pool: pool, handlers: hs, cfg: cfg, gate: gate.New(cfg.ActiveLimit)}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &taskWorker{svc: s}); err != nil {
		return nil, fmt.Errorf("register task worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &reconcileWorker{svc: s}); err != nil {
		return nil, fmt.Errorf("register reconcile worker: %w", err)
	}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileInterval),
			func() (river.JobArgs, *river.InsertOpts) { return reconcileArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}),
	}
	if err := river.AddWorkerSafely(workers, &retentionWorker{svc: s}); err != nil {
		return nil, fmt.Errorf("register retention worker: %w", err)
	}
	// The partitions ahead of time are made by the leader, never on a
	// task's path; RunOnStart makes them as soon as a leader is elected.
	periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(cfg.Retention.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return retentionArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true}))
	if cfg.TasksMD.Store != nil && cfg.TasksMD.Path != "" {
		if err := river.AddWorkerSafely(workers, &tasksMDWorker{svc: s}); err != nil {
			return nil, fmt.Errorf("register tasks.md worker: %w", err)
		}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                cfg.ID,
		Logger:            slog.New(riverLog{cfg.Logger.Handler()}),
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		JobTimeout:        cfg.TaskTimeout,
		Queues: map[string]river.QueueConfig{
			TaskQueue:        {MaxWorkers: cfg.Concurrency},
			MaintenanceQueue: {MaxWorkers: 1},
		},
		Workers: workers,
		// Periodic jobs run only on River's elected leader, so the backstop
		// runs once per cluster, however many replicas there are.
		PeriodicJobs: periodic,
	})
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	s.client = client
	return s, nil
}

// Start starts fetching and working jobs. It returns at once.
func (s *Service) Start(ctx context.Context) error {
	// River treats the end of its start context as StopAndCancel; shutdown
	// goes through Stop instead, which first lets running tasks finish.
	if err := s.client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river client: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopSweep, s.swept = cancel, make(chan struct{})
	go s.sweepLeases(sctx)
	s.scheduled = make(chan struct{})
	if s.cfg.TasksMD.Store != nil && s.cfg.TasksMD.Path != "" {
		mctx, mcancel := context.WithCancel(context.WithoutCancel(ctx))
		s.stopMD = mcancel
		go func() {
			defer close(s.scheduled)
			s.scheduleTasksMD(mctx)
		}()
	} else {
		close(s.scheduled)
		s.stopMD = func() {}
	}
	s.announced = make(chan struct{})
	if s.cfg.Announcer == nil {
		close(s.announced)
		s.stopAnn = func() {}
		return nil
	}
	actx, acancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopAnn = acancel
	go func() {
		defer close(s.announced)
		_ = s.cfg.Announcer.Run(actx) // returns nil when actx ends
	}()
	return nil
}

// stopAnnouncer stops the announcer once no task writes any more; it sends
// what is still queued first.
func (s *Service) stopAnnouncer() {
	if s.stopAnn != nil {
		s.stopAnn()
		<-s.announced
	}
}

// Stop stops taking new tasks and waits for running ones to finish. If ctx
// ends first, running tasks are cancelled; River retries them later, on
// this replica or another.
func (s *Service) Stop(ctx context.Context) error {
	s.stopping.Store(true)
	if s.stopSweep != nil {
		s.stopSweep()
		<-s.swept
		s.stopMD()
		<-s.scheduled
	}
	defer s.stopAnnouncer()
	err := s.client.Stop(ctx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stop river client: %w", err)
	}
	s.cfg.Logger.Warn("graceful stop timed out; cancelling running tasks")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.client.StopAndCancel(cctx); err != nil {
		return fmt.Errorf("stop and cancel river client: %w", err)
	}
	return nil
}

// Submit creates a task from Go. The pickup trigger enqueues a queued
// task's River job in the same statement, as for any writer, so the job
// takes its project's turn in the queue (agentworker_queue_turn) whoever
// inserted the task.
func (s *Service) Submit(ctx context.Context, nt agentsql.NewTask) (agentsql.Task, error) {
	return agentsql.InsertTask(ctx, s.pool, nt)
}

// taskWorker claims a task and dispatches it to its type's handler.
type taskWorker struct {
	river.WorkerDefaults[TaskArgs]
	svc *Service
}

func (w *taskWorker) Work(ctx context.Context, job *river.Job[TaskArgs]) error {
	s := w.svc
	log := s.cfg.Logger.With(slog.String("task_id", job.Args.TaskID.String()), slog.Int64("job_id", job.ID))
	// The claim is work too: a task takes its turn first.
	turn, err := s.gate.Enter(ctx)
	if err != nil {
		return fmt.Errorf("task %s: %w", job.Args.TaskID, err)
	}
	defer turn.Leave()
	ctx = gate.WithTurn(ctx, turn)
	claimStart := time.Now()
	c, err := s.capClaim(ctx, job, log)
	if errors.Is(err, agentsql.ErrTaskNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	task := c.Task
	trace := handlers.TraceID(task)
	log = log.With(slog.String(traceid.Key, trace))
	if !c.Claimed {
		log.DebugContext(ctx, "task not claimable; nothing to do", slog.String("status", string(task.Status)))
		return nil
	}
	h, ok := s.handlers[task.Type]
	if !ok {
		return river.JobCancel(fmt.Errorf("task %s: no handler for type %q", task.ID, task.Type))
	}
	var attempt tracing.Span // off: does nothing
	if s.cfg.Tracing != nil {
		ctx, attempt = s.cfg.Tracing.StartAttempt(ctx, tracing.Attempt{TraceID: trace, TraceParent: task.TraceParent,
			TaskID: task.ID.String(), TaskType: string(task.Type), Agent: string(task.Type), Number: task.Retries + 1, Start: claimStart})
		tracing.Claimed(ctx, claimStart, time.Now())
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := make(chan struct{})
	fence := agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
	go func() {
		defer close(renewed)
		s.holdLease(hctx, cancel, fence)
	}()
	started := time.Now()
	// The task's own retry budget decides, whatever job carries it: a
	// retry waits with its job snoozed, not as a River retry.
	err = h.Handle(hctx, task, handlers.Attempt{JobID: job.ID, Fence: task.Fence, Number: task.Retries + 1,
		MaxAttempts: taskMaxAttempts, WorkerID: s.cfg.ID, NoCheckpoint: !c.Checkpointed,
		PauseRequested: &c.PauseRequested, ChangeSet: c.ChangeSet, EventsSince: c.EventsSince, DayCap: c.DayCap})
	attempt.End(err)
	if s.cfg.Runs != nil {
		s.cfg.Runs.ObserveRun(string(task.Type), time.Since(started), err)
	}
	lost := errors.Is(context.Cause(hctx), ErrLeaseLost)
	cancel(nil)
	<-renewed
	if err != nil && lost {
		// Another replica holds the task now: this job has nothing left to do.
		log.WarnContext(ctx, "task lease lost to another holder; dropping this attempt")
		return river.JobCancel(fmt.Errorf("task %s: %w", task.ID, ErrLeaseLost))
	}
	if err != nil && s.stopping.Load() && ctx.Err() != nil {
		// Cut short by shutdown: hand the task back at once rather than
		// letting its lease lapse, so another replica starts it now.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		released, rerr := agentsql.ReleaseTask(rctx, s.pool, fence, "worker "+s.cfg.ID+" shutting down")
		switch {
		case rerr != nil:
			log.WarnContext(ctx, "hand back task on shutdown", slog.String("err", rerr.Error()))
		case released:
			log.InfoContext(ctx, "task handed back to the queue on shutdown")
		}
		rcancel()
	}
	return err
}

// ErrLeaseLost is the cause of a task's context when its lease was taken
// over by another replica (or the task left running) while this worker ran it.
var ErrLeaseLost = errors.New("task lease lost")

// holdLease renews the task's lease every Lease/3 until ctx ends. When the
// task is no longer ours it cancels the task's context with ErrLeaseLost.
// A failed renewal is retried at the next tick: the lease outlives two.
func (s *Service) holdLease(ctx context.Context, cancel context.CancelCauseFunc, f agentsql.Fence) {
	t := time.NewTicker(s.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, s.cfg.Lease/3)
		err := agentsql.RenewLease(rctx, s.pool, f, s.cfg.Lease)
		rcancel()
		switch {
		case errors.Is(err, agentsql.ErrFenced):
			cancel(ErrLeaseLost)
			return
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.WarnContext(ctx, "renew task lease", slog.String("task_id", f.TaskID.String()), slog.String("err", err.Error()))
		}
	}
}

// sweepLeases hands running tasks whose lease lapsed back to the queue. It
// runs on every replica, not only River's leader: a dead leader keeps its
// leadership for several seconds, and the sweep is safe to run concurrently
// (SKIP LOCKED).
func (s *Service) sweepLeases(ctx context.Context) {
	defer close(s.swept)
	t := time.NewTicker(s.cfg.LeaseSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		taken, err := agentsql.TakeOverLapsed(ctx, s.pool, 100)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "sweep lapsed leases", slog.String("err", err.Error()))
			}
			continue
		}
		for _, tk := range taken {
			s.cfg.Logger.WarnContext(ctx, "task lease lapsed; requeued for another worker",
				slog.String("task_id", tk.TaskID.String()), slog.String("lease_owner", tk.LeaseOwner), slog.Duration("lapsed_for", tk.LapsedFor))
		}
	}
}

// claim runs the claim stage: lock the row, take it and its lease if
// claimable, write the stage and lifecycle events and open a build's
// change set, in one statement
// (one round trip, one commit: it is on every task's path from insert to
// start). With an announcer, the events are announced once it committed.
func (s *Service) claim(ctx context.Context, job *river.Job[TaskArgs]) (agentsql.Claim, error) {
	c, err := agentsql.ClaimAndStart(ctx, s.pool, job.Args.TaskID, job.ID, s.cfg.ID, s.cfg.Lease, s.cfg.Announcer != nil, s.cfg.ProjectMaxCostUSDPerDay)
	if err != nil {
		return agentsql.Claim{}, err
	}
	if c.Claimed && s.cfg.Announcer != nil {
		s.cfg.Announcer.Announce(c.Task.ID, c.Task.ProjectID)
	}
	return c, nil
}

// capClaim claims the task unless its project is at ProjectMaxRunning, in
// which case the job is snoozed. This process checks and claims one task
// at a time under the cap, so its own tasks cannot pass it together.
func (s *Service) capClaim(ctx context.Context, job *river.Job[TaskArgs], log *slog.Logger) (agentsql.Claim, error) {
	if s.cfg.ProjectMaxRunning <= 0 {
		return s.claim(ctx, job)
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	n, err := agentsql.ProjectRunning(ctx, s.pool, job.Args.TaskID)
	if err != nil {
		return agentsql.Claim{}, err
	}
	if n >= s.cfg.ProjectMaxRunning {
		d := s.cfg.ProjectCapSnooze + rand.N(s.cfg.ProjectCapSnooze/4+1)
		log.DebugContext(ctx, "project at its running cap; task snoozed", slog.Int("running", n), slog.Duration("snooze", d))
		return agentsql.Claim{}, river.JobSnooze(d)
	}
	return s.claim(ctx, job)
}

type reconcileArgs struct{}

func (reconcileArgs) Kind() string { return MaintenanceKind }

func (reconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue, MaxAttempts: 1}
}

// reconcileWorker enqueues queued tasks that have no live job: the backstop
// for a lost pickup (rows copied in with triggers disabled, a job deleted by
// hand); and queues waiting tasks whose dependencies have all succeeded.
type reconcileWorker struct {
	river.WorkerDefaults[reconcileArgs]
	svc *Service
}

func (w *reconcileWorker) Work(ctx context.Context, _ *river.Job[reconcileArgs]) error {
	n, err := w.svc.Reconcile(ctx)
	if n > 0 {
		w.svc.cfg.Logger.InfoContext(ctx, "reconciler enqueued orphaned tasks", slog.Int("count", n))
	}
	stranded, serr := agentsql.ReleaseStranded(ctx, w.svc.pool, w.svc.cfg.ReconcileMinAge, 1000)
	if len(stranded) > 0 {
		w.svc.cfg.Logger.WarnContext(ctx, "reconciler released waiting tasks whose dependencies had all succeeded",
			slog.Int("count", len(stranded)), slog.Any("task_ids", stranded))
	}
	idle, ierr := agentsql.FlagIdle(ctx, w.svc.pool, w.svc.cfg.StuckIdleTimeout)
	for _, id := range idle {
		w.svc.cfg.Logger.WarnContext(ctx, "task looks stuck: no progress", slog.String("task_id", id.String()),
			slog.Duration("idle_timeout", w.svc.cfg.StuckIdleTimeout))
	}
	resumed, rerr := agentsql.ResumeUnderCap(ctx, w.svc.pool, w.svc.cfg.ProjectMaxCostUSDPerDay, uuid.Nil)
	if len(resumed) > 0 {
		w.svc.cfg.Logger.InfoContext(ctx, "reconciler resumed tasks paused at their project's daily cost cap",
			slog.Int("count", len(resumed)))
	}
	return errors.Join(err, serr, ierr, rerr)
}

// Reconcile enqueues a River job for every queued task older than
// ReconcileMinAge that has none, and returns how many it enqueued.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	return agentsql.EnqueueOrphans(ctx, s.pool, s.cfg.ReconcileMinAge, s.cfg.ClaimTimeout, 1000)
}
