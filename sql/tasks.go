package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries need: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	// ErrTaskNotFound reports that no ai_tasks row has the given id.
	ErrTaskNotFound = errors.New("task not found")
	// ErrIllegalTransition reports a status move the task state machine forbids.
	ErrIllegalTransition = errors.New("illegal task status transition")
)

// TaskType is an ai_tasks type: it picks the handler and its tools.
type TaskType string

// Task types; chat and plan get read-only tools, build the full set.
const (
	TypeChat  TaskType = "chat"
	TypePlan  TaskType = "plan"
	TypeBuild TaskType = "build"
)

// Valid reports whether t is one of the task types the table accepts.
func (t TaskType) Valid() bool {
	return t == TypeChat || t == TypePlan || t == TypeBuild
}

// Status is an ai_tasks status.
type Status string

// Task statuses; the legal moves between them are CanTransition, mirrored by
// the agentworker_task_transitions table.
const (
	StatusQueued        Status = "queued"
	StatusRunning       Status = "running"
	StatusSucceeded     Status = "succeeded"
	StatusFailed        Status = "failed"
	StatusBlocked       Status = "blocked"
	StatusCancelled     Status = "cancelled"
	StatusPaused        Status = "paused"
	StatusAwaitingInput Status = "awaiting_input"
	// StatusWaiting: a dependency has not succeeded yet; the task has no job.
	StatusWaiting Status = "waiting"
	// StatusReview: a build finished cleanly and waits for a person to
	// approve or reject its staged change set; it holds no lease.
	StatusReview Status = "review"
	// StatusAwaitingApproval: a tool call of the last model turn matched an
	// ask rule of the task's tool policy and waits for a person to approve
	// or deny it; the task holds no lease.
	StatusAwaitingApproval Status = "awaiting_approval"
)

// Terminal reports whether no further work happens in this status without a retry.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusBlocked, StatusCancelled:
		return true
	}
	return false
}

// CanTransition is the task state machine: the one place that says which
// status moves are legal.
func CanTransition(from, to Status) bool {
	switch from {
	case StatusQueued:
		return to == StatusRunning || to == StatusCancelled || to == StatusPaused || to == StatusWaiting
	case StatusWaiting:
		return to == StatusQueued || to == StatusBlocked || to == StatusCancelled || to == StatusPaused
	case StatusRunning:
		switch to {
		case StatusSucceeded, StatusFailed, StatusBlocked, StatusCancelled,
			StatusPaused, StatusAwaitingInput, StatusQueued, StatusReview, StatusAwaitingApproval:
			return true
		}
	case StatusReview:
		return to == StatusSucceeded || to == StatusQueued || to == StatusCancelled
	case StatusPaused, StatusAwaitingInput, StatusAwaitingApproval:
		return to == StatusQueued || to == StatusCancelled
	case StatusBlocked:
		return to == StatusQueued || to == StatusWaiting // retry, or its failed dependency retried
	case StatusFailed, StatusCancelled:
		return to == StatusQueued // retry
	}
	return false
}

// Task is one ai_tasks row.
type Task struct {
	ID         uuid.UUID
	ProjectID  uuid.UUID
	Type       TaskType
	Status     Status
	Prompt     string
	Input      json.RawMessage
	Result     json.RawMessage
	Error      json.RawMessage
	Model      string
	Attempt    int
	TokensIn   int64
	TokensOut  int64
	Cost       float64
	LastSeq    int
	RiverJobID *int64
	// Fence is the lease epoch of the task's current claim (see Fence).
	Fence int64
	// Retries counts the task's transient failures since it was created or
	// retried by a person: its own retry budget, whatever job carries it.
	Retries    int
	Version    int
	CreatedAt  time.Time
	UpdatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	// AgentID is the agent the task runs as, if any.
	AgentID *uuid.UUID
	// Priority is 1 (most urgent) … 4, its River job's priority.
	Priority int
	// ParentTaskID is the task this one is part of, if any.
	ParentTaskID *uuid.UUID
	// Approved: the task was approved in review; its attempt only applies
	// its staged change set.
	Approved bool
	// TraceID is the trace of the request that created the task ("" when
	// it was inserted without one); set on insert, never changed.
	TraceID string
	// TraceParent is the span id (16 lowercase hex) of the request that
	// created the task, in TraceID's trace ("" when none).
	TraceParent string
	// PauseRequested: a pause of the running task was requested; it takes
	// effect at the next iteration boundary.
	PauseRequested bool
}

const taskColumns = `id, project_id, type, status, coalesce(prompt, ''), input, result, error,
	coalesce(model, ''), attempt, tokens_in, tokens_out, cost::float8, last_seq, river_job_id,
	fence, retries, version, created_at, updated_at, started_at, finished_at,
	agent_id, priority, parent_task_id, approved, coalesce(trace_id, ''), pause_requested, coalesce(trace_parent, '')`

func scanTask(row pgx.Row) (Task, error) {
	var t Task
	err := row.Scan(taskDest(&t)...)
	return t, err
}

// taskDest is the scan destination of taskColumns.
func taskDest(t *Task) []any {
	return []any{&t.ID, &t.ProjectID, &t.Type, &t.Status, &t.Prompt, &t.Input, &t.Result, &t.Error,
		&t.Model, &t.Attempt, &t.TokensIn, &t.TokensOut, &t.Cost, &t.LastSeq, &t.RiverJobID,
		&t.Fence, &t.Retries, &t.Version, &t.CreatedAt, &t.UpdatedAt, &t.StartedAt, &t.FinishedAt,
		&t.AgentID, &t.Priority, &t.ParentTaskID, &t.Approved, &t.TraceID, &t.PauseRequested, &t.TraceParent}
}

// NewTask is what an app supplies to create a task.
type NewTask struct {
	ProjectID uuid.UUID
	Type      TaskType
	Prompt    string
	Input     json.RawMessage // nil means {}
	Model     string
	// AgentID names an enabled agent of the project to run the task as.
	AgentID *uuid.UUID
	// Priority is 1 (most urgent) … 4; 0 means the default, 2.
	Priority int
	// ParentTaskID names a task of the same project this one is part of.
	ParentTaskID *uuid.UUID
	// DependsOn lists tasks of the project that must succeed before this one
	// starts; until then it is waiting. Inserted with the task, in one
	// transaction.
	DependsOn []uuid.UUID
	// TraceID is the trace of the request creating the task (see package
	// traceid); "" stores none.
	TraceID string
	// TraceParent is the span id of that request (16 lowercase hex); ""
	// stores none.
	TraceParent string
}

// RuleError is a write refused by a rule of the task graph; Code is the
// error code apps see: INVALID_ASSIGNEE, INVALID_PARENT_TASK,
// INVALID_TASK_DEPENDENCY, TASK_HAS_DEPENDENTS, AGENT_HAS_TASKS or
// AGENT_NAME_TAKEN.
type RuleError struct {
	Code    string
	Message string
}

func (e *RuleError) Error() string { return e.Message }

// graphRules maps the constraint a graph rule raises under to its code.
var graphRules = map[string]string{
	"ai_tasks_agent":             "INVALID_ASSIGNEE",
	"ai_tasks_parent":            "INVALID_PARENT_TASK",
	"task_dependencies_rule":     "INVALID_TASK_DEPENDENCY",
	"ai_tasks_dependents":        "TASK_HAS_DEPENDENTS",
	"agents_tasks":               "AGENT_HAS_TASKS",
	"agents_project_id_name_key": "AGENT_NAME_TAKEN",
	"tool_policy_valid":          "INVALID_TOOL_POLICY",
}

// asRuleError returns err as a *RuleError when a graph rule refused it.
func asRuleError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if code, ok := graphRules[pgErr.ConstraintName]; ok {
			return &RuleError{Code: code, Message: pgErr.Message}
		}
	}
	return err
}

// InsertTask creates a task: queued, or waiting when it depends on a task
// that has not succeeded. The pickup trigger enqueues a queued task's River
// job in the same transaction. With DependsOn, db must be able to begin a
// transaction (a pool, a connection or a transaction).
func InsertTask(ctx context.Context, db DBTX, nt NewTask) (Task, error) {
	if len(nt.DependsOn) == 0 {
		return insertTask(ctx, db, nt)
	}
	beginner, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return Task{}, fmt.Errorf("insert %s task for project %s with dependencies: %T cannot begin a transaction", nt.Type, nt.ProjectID, db)
	}
	var t Task
	err := pgx.BeginFunc(ctx, beginner, func(tx pgx.Tx) error {
		var err error
		if t, err = insertTask(ctx, tx, nt); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `INSERT INTO task_dependencies (task_id, depends_on_task_id) SELECT $1, unnest($2::uuid[])`, t.ID, nt.DependsOn); err != nil {
			return fmt.Errorf("insert the dependencies of task %s on %v: %w", t.ID, nt.DependsOn, asRuleError(err))
		}
		t, err = scanTask(tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM ai_tasks WHERE id = $1`, t.ID))
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

func insertTask(ctx context.Context, db DBTX, nt NewTask) (Task, error) {
	input := nt.Input
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	t, err := scanTask(db.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, input, model, agent_id, priority, parent_task_id, trace_id, trace_parent)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6, coalesce(nullif($7, 0), 2), $8, nullif($9, ''), nullif($10, '')) RETURNING `+taskColumns,
		nt.ProjectID, nt.Type, nt.Prompt, input, nt.Model, nt.AgentID, nt.Priority, nt.ParentTaskID, nt.TraceID, nt.TraceParent))
	if err != nil {
		return Task{}, fmt.Errorf("insert %s task for project %s: %w", nt.Type, nt.ProjectID, asRuleError(err))
	}
	return t, nil
}

// GetTask reads one task.
func GetTask(ctx context.Context, db DBTX, id uuid.UUID) (Task, error) {
	t, err := scanTask(db.QueryRow(ctx, `SELECT `+taskColumns+` FROM ai_tasks WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("get task %s: %w", id, ErrTaskNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

// Claim is what ClaimTask found and did.
type Claim struct {
	Task Task
	// Claimed: the task was claimable by this job and is now running
	// under a new fence epoch (Task.Fence), leased to the claimer.
	Claimed bool
	// Checkpointed: the task has a checkpoint an earlier attempt saved.
	Checkpointed bool
	// PauseRequested: a pause was requested when the task was claimed. The
	// claim does not act on it; the first iteration boundary does.
	PauseRequested bool
	// ChangeSet is the change set ClaimAndStart opened for a claimed build
	// task; nil otherwise.
	ChangeSet *OpenedChangeSet
	// EventsSince bounds the task's events from below: none is older
	// (agentworker_event_floor of the task's event id floor, read at the
	// claim; seals only add up, so it stays true). The holder's batches
	// pass it on (EventBatch.Since) so that their key check reads only
	// those days. Zero: no bound (a task older than the floor column).
	EventsSince time.Time
	// DayCap is the project's daily cap (its own, else the default the
	// claim was given; CapUSD nil: none) and its spend of the UTC day, as
	// the claim's statement read them: every spend committed before the
	// claim. Without a cap the spend is not summed (0). Nil when not
	// claimed.
	DayCap *DayCap
}

// OpenedChangeSet is what opening a build's change set found: its status
// (ChangeSetOpen, ...) and whether this open created it (a new set has no
// entries and no decisions yet), as OpenChangeSet returns them.
type OpenedChangeSet struct {
	Status  string
	Created bool
}

// ClaimTask locks the task row and, when the task is claimable by this job,
// moves it to running, leases it to workerID for lease and opens a
// task_runs row for the attempt, in one round trip
// (agentworker_claim_task). A task is claimable when queued, or running
// under this very job (River retrying it after a crash). Otherwise Claimed
// is false and nothing changes, so a duplicate job is harmless. Every
// claim starts a new fence epoch: whatever held the task before can write
// nothing more.
func ClaimTask(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, workerID string, lease time.Duration) (Claim, error) {
	return claimTask(ctx, db, id, jobID, workerID, lease, nil, 0)
}

// ClaimAndStart is ClaimTask that also starts the task in the same
// statement, so a claim through a pool is one round trip and one commit:
// it writes a successful claim's events (stage_enter claim, agent_phase
// started, stage_exit claim) and opens a build task's change set as
// OpenChangeSet would (Claim.ChangeSet). afterCommit: the events are not
// notified in the transaction; the caller announces them once it committed
// (events.Announcer). defaultCapUSD is the daily cap of a project without
// one of its own (0: none), for Claim.DayCap.
func ClaimAndStart(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, workerID string, lease time.Duration, afterCommit bool, defaultCapUSD float64) (Claim, error) {
	mode := "notify"
	if afterCommit {
		mode = "after_commit"
	}
	return claimTask(ctx, db, id, jobID, workerID, lease, &mode, defaultCapUSD)
}

// claimTask claims; with startEvents set it also starts the task (see
// ClaimAndStart).
func claimTask(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, workerID string, lease time.Duration, startEvents *string, defaultCapUSD float64) (Claim, error) {
	var (
		c             Claim
		csStatus      *string
		csCreated     *bool
		since         *time.Time
		capUSD, spent *float64
	)
	// The project's day cap and spend come with the claim, so that the
	// first model call needs no read of its own: the statement commits on
	// its own and sees every spend committed before it.
	err := db.QueryRow(ctx, `SELECT c.claimed, c.checkpointed, c.change_set_status, c.change_set_created, k.pause_requested,
			CASE WHEN k.events_id_floor IS NOT NULL THEN nullif(agentworker_event_floor(NULL, k.events_id_floor + 1), '-infinity') END,
			d.cap::float8, d.spent::float8, `+taskColumns+`
		FROM agentworker_claim_task($1, $2, $3, $4, $5, $6) c CROSS JOIN LATERAL (SELECT (c.task).*) k
		LEFT JOIN LATERAL (SELECT cap, spent FROM agentworker_day_cap(k.project_id, $7) WHERE c.claimed) d ON true`,
		id, jobID, workerID, lease, startEvents, startEvents != nil, defaultCapUSD).
		Scan(append([]any{&c.Claimed, &c.Checkpointed, &csStatus, &csCreated, &c.PauseRequested, &since, &capUSD, &spent}, taskDest(&c.Task)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Claim{}, fmt.Errorf("claim task %s: %w", id, ErrTaskNotFound)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("claim task %s for job %d: %w", id, jobID, err)
	}
	if csStatus != nil {
		c.ChangeSet = &OpenedChangeSet{Status: *csStatus, Created: csCreated != nil && *csCreated}
	}
	if since != nil {
		c.EventsSince = *since
	}
	if c.Claimed && spent != nil {
		c.DayCap = &DayCap{CapUSD: capUSD, SpentUSD: *spent}
	}
	return c, nil
}

// Outcome is how an attempt ended, written by FinishTask.
type Outcome struct {
	Status    Status          // the task's next status
	RunStatus string          // the task_runs status of this attempt
	Result    json.RawMessage // for succeeded
	Error     json.RawMessage // for failed and friends
	ErrorCode string
	ErrorMsg  string
	TokensIn  int64
	TokensOut int64
	Cost      float64
	// RateWait is the rate-limit wait not yet counted on the run.
	RateWait time.Duration
	Model    string
}

// FinishTask closes the current attempt of the task held by f: it moves the
// task through the state machine and closes its run row. ErrFenced means
// another attempt took the task over (or someone cancelled it) meanwhile.
// A holder writes its closing events before FinishTask, in its
// transaction: once the task left running, its fence refuses every write.
func FinishTask(ctx context.Context, tx pgx.Tx, f Fence, o Outcome) (Task, error) {
	query, args, err := finishTaskStatement(f, o)
	if err != nil {
		return Task{}, err
	}
	t, err := scanTask(tx.QueryRow(ctx, query, args...))
	if err := finishTaskErr(f, o, err); err != nil {
		return Task{}, err
	}
	return t, nil
}

// QueueFinishTask queues FinishTask's statement in p, for a pipeline that
// also writes the closing events. It refuses an illegal outcome at once.
func QueueFinishTask(p *Pipeline, f Fence, o Outcome) error {
	query, args, err := finishTaskStatement(f, o)
	if err != nil {
		return err
	}
	p.batch.Queue(query, args...).QueryRow(func(row pgx.Row) error {
		_, err := scanTask(row)
		return finishTaskErr(f, o, err)
	})
	return nil
}

func finishTaskErr(f Fence, o Outcome, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("finish task %s as %s: %w", f.TaskID, o.Status, ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("finish task %s as %s: %w", f.TaskID, o.Status, err)
	}
	return nil
}

func finishTaskStatement(f Fence, o Outcome) (string, []any, error) {
	// Only a running task is finished: a holder whose task left running
	// was fenced, whatever status it is in now.
	if !CanTransition(StatusRunning, o.Status) {
		return "", nil, fmt.Errorf("finish task %s: %s -> %s: %w", f.TaskID, StatusRunning, o.Status, ErrIllegalTransition)
	}
	// One statement: the task, then its run (usage is added: checkpoints
	// counted the earlier iterations already).
	return `WITH t AS (
			UPDATE ai_tasks SET status = $2, result = coalesce($3, result),
				error = $4, tokens_in = tokens_in + $5, tokens_out = tokens_out + $6, cost = cost + $7,
				model = coalesce(nullif($8, ''), model),
				finished_at = CASE WHEN $9 THEN now() END, updated_at = now(), version = version + 1
			WHERE id = $1 AND fence = $10 AND status = 'running'
			RETURNING *),
		r AS (
			UPDATE task_runs r SET status = $11, tokens_in = r.tokens_in + $5, tokens_out = r.tokens_out + $6, cost = r.cost + $7,
				error_code = nullif($12, ''), error_message = nullif($13, ''), finished_at = now(),
				rate_limit_wait_ms = r.rate_limit_wait_ms + $14
			FROM t WHERE r.task_id = $1 AND r.attempt = t.attempt)
		SELECT ` + taskColumns + ` FROM t`,
		[]any{f.TaskID, o.Status, nullJSON(JSONB(o.Result)), nullJSON(JSONB(o.Error)), o.TokensIn, o.TokensOut, o.Cost, o.Model,
			o.Status.Terminal(), f.Epoch, o.RunStatus, o.ErrorCode, Text(o.ErrorMsg), o.RateWait.Milliseconds()}, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// EnqueueOrphans enqueues, as the pickup trigger would have, up to limit
// queued tasks older than minAge that have no live River job, oldest
// first, and returns how many: the pickup trigger's work was lost (for
// example, rows copied in with triggers disabled), or the job's worker died
// between River's fetch and the claim's commit, leaving the job running for
// claimStuck and more while its task is still queued (River's rescuer would
// wait for the job timeout). Each job takes its project's turn
// (agentworker_enqueue_task).
func EnqueueOrphans(ctx context.Context, db DBTX, minAge, claimStuck time.Duration, limit int) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(agentworker_enqueue_task(o.id)) FROM (
		SELECT t.id FROM ai_tasks t
		WHERE t.status = 'queued' AND t.created_at < now() - $1::interval
		AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = 'ai_task' AND j.args ->> 'task_id' = t.id::text
			AND j.state NOT IN ('completed', 'cancelled', 'discarded')
			AND NOT (j.state = 'running' AND j.attempted_at < now() - $3::interval))
		ORDER BY t.created_at LIMIT $2) o`, minAge, limit, claimStuck).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("enqueue orphaned tasks: %w", err)
	}
	return n, nil
}

// ReleaseStranded queues, as the last dependency's success would have,
// up to limit tasks waiting for longer than minAge whose dependencies have
// all succeeded, and returns them: the reconciler's backstop for a release
// the graph's triggers missed.
func ReleaseStranded(ctx context.Context, db DBTX, minAge time.Duration, limit int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT agentworker_release_stranded($1::interval, $2)`, minAge, limit)
	if err != nil {
		return nil, fmt.Errorf("release stranded waiting tasks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("release stranded waiting tasks: %w", err)
	}
	return ids, nil
}

// ScheduleRetry ends the attempt of the task held by f with a transient
// failure and leaves it waiting for its retry: the run is retry_scheduled
// until now()+after, the task queued (the lease sweeper leaves it alone)
// under the same River job, which the caller snoozes for after, and the
// task's retry budget is one smaller. The spend not yet counted is added.
// Call it in a transaction: it sets what the guard triggers need to know.
func ScheduleRetry(ctx context.Context, tx pgx.Tx, f Fence, code, msg string, after time.Duration, spend Spend) error {
	if _, err := tx.Exec(ctx, `SELECT set_config('agentworker.requeue', 'on', true), set_config('agentworker.skip_enqueue', 'on', true)`); err != nil {
		return fmt.Errorf("schedule retry of task %s: %w", f.TaskID, err)
	}
	if err := AddRunUsage(ctx, tx, f, spend); err != nil {
		return err
	}
	if _, err := fenced(ctx, tx, f, `w AS (UPDATE task_runs r SET status = 'retry_scheduled', next_retry_at = now() + $3::interval,
			error_code = $4, error_message = $5, finished_at = now()
		FROM ai_tasks t WHERE t.id = $1 AND r.task_id = $1 AND r.attempt = t.attempt AND EXISTS (SELECT 1 FROM fence)
		RETURNING 1)`, after, code, Text(msg)); err != nil {
		return fmt.Errorf("schedule retry of task %s: mark run: %w", f.TaskID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE ai_tasks SET status = 'queued', retries = retries + 1, updated_at = now() WHERE id = $1`, f.TaskID); err != nil {
		return fmt.Errorf("schedule retry of task %s: requeue: %w", f.TaskID, err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('agentworker.requeue', '', true), set_config('agentworker.skip_enqueue', '', true)`); err != nil {
		return fmt.Errorf("schedule retry of task %s: %w", f.TaskID, err)
	}
	return nil
}

// TaskGauges counts tasks by status and the River jobs of ai_tasks waiting
// to run, for metrics.
func TaskGauges(ctx context.Context, db DBTX) (map[Status]int64, int64, error) {
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM ai_tasks GROUP BY status`)
	if err != nil {
		return nil, 0, fmt.Errorf("count tasks by status: %w", err)
	}
	counts := map[Status]int64{}
	var st Status
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[st] = n; return nil }); err != nil {
		return nil, 0, fmt.Errorf("count tasks by status: %w", err)
	}
	var depth int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = 'ai_tasks'
		AND state IN ('available', 'scheduled', 'retryable')`).Scan(&depth); err != nil {
		return nil, 0, fmt.Errorf("count queued jobs: %w", err)
	}
	return counts, depth, nil
}

// TaskRelations reads the tasks a task depends on, those that depend on it
// and its children, each oldest first.
func TaskRelations(ctx context.Context, db DBTX, id uuid.UUID) (dependsOn, dependents, children []uuid.UUID, err error) {
	err = db.QueryRow(ctx, `SELECT
			(SELECT array_agg(depends_on_task_id ORDER BY created_at) FROM task_dependencies WHERE task_id = $1),
			(SELECT array_agg(task_id ORDER BY created_at) FROM task_dependencies WHERE depends_on_task_id = $1),
			(SELECT array_agg(id ORDER BY created_at) FROM ai_tasks WHERE parent_task_id = $1)`, id).
		Scan(&dependsOn, &dependents, &children)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the relations of task %s: %w", id, err)
	}
	return dependsOn, dependents, children, nil
}

// ProjectRunning counts the running tasks of task id's project, all
// replicas together, other than id itself.
func ProjectRunning(ctx context.Context, db DBTX, id uuid.UUID) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM ai_tasks r
		WHERE r.project_id = (SELECT project_id FROM ai_tasks WHERE id = $1) AND r.status = 'running' AND r.id <> $1`, id).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the running tasks of task %s's project: %w", id, err)
	}
	return n, nil
}
