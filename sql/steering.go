package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var (
	// ErrVersionConflict reports a control action whose expected version is stale.
	ErrVersionConflict = errors.New("task version conflict")
	// ErrInvalidAction reports an unknown action, or an answer without text.
	ErrInvalidAction = errors.New("invalid control action")
)

// Action is a control action on a task: what a person or an app does to
// steer it. Each is a SQL function (agentworker_<action>_task, and
// agentworker_answer_input) and an HTTP endpoint.
type Action string

// Control actions.
const (
	ActionCancel Action = "cancel"
	ActionPause  Action = "pause"
	ActionResume Action = "resume"
	ActionRetry  Action = "retry"
	ActionAnswer Action = "answer"
)

// Actions lists every control action.
var Actions = []Action{ActionCancel, ActionPause, ActionResume, ActionRetry, ActionAnswer}

// Statuses lists every task status.
var Statuses = []Status{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusBlocked,
	StatusCancelled, StatusPaused, StatusAwaitingInput}

// Target is the status an action moves a task to.
func (a Action) Target() Status {
	switch a {
	case ActionCancel:
		return StatusCancelled
	case ActionPause:
		return StatusPaused
	case ActionResume, ActionRetry, ActionAnswer:
		return StatusQueued
	}
	return ""
}

// Permits reports whether the action may be taken on a task in status from:
// the move must be legal (CanTransition) and start where the action applies
// (resume only a paused task, answer only one awaiting input, retry only an
// ended one). agentworker_control_task applies the same rule.
func (a Action) Permits(from Status) bool {
	var ok bool
	switch a {
	case ActionCancel:
		ok = from == StatusQueued || from == StatusRunning || from == StatusPaused || from == StatusAwaitingInput
	case ActionPause:
		ok = from == StatusQueued || from == StatusRunning
	case ActionResume:
		ok = from == StatusPaused
	case ActionRetry:
		ok = from == StatusFailed || from == StatusBlocked || from == StatusCancelled
	case ActionAnswer:
		ok = from == StatusAwaitingInput
	}
	return ok && CanTransition(from, a.Target())
}

// ControlOpts qualifies a control action.
type ControlOpts struct {
	// ExpectedVersion, when set, must equal the task's version or the
	// action is refused with ErrVersionConflict.
	ExpectedVersion *int
	// Actor names who acts, for the audit event. Defaults to the database user.
	Actor string
	// Answer is the reply to the agent's question; required by ActionAnswer.
	Answer string
}

// ControlResult is what agentworker_control_task returns.
type ControlResult struct {
	Outcome string    `json:"outcome"` // applied | rejected | conflict | invalid | not_found
	TaskID  uuid.UUID `json:"task_id"`
	Action  Action    `json:"action"`
	From    Status    `json:"from,omitempty"`
	Status  Status    `json:"status,omitempty"`
	Version int       `json:"version,omitempty"`
	Error   string    `json:"error,omitempty"`
	// Pending is set when a pause of a running task was requested: the
	// task stays running until its loop reaches the next iteration boundary.
	Pending bool `json:"pending,omitempty"`
}

// ControlError is a refused control action. It wraps ErrIllegalTransition,
// ErrVersionConflict, ErrInvalidAction or ErrTaskNotFound.
type ControlError struct {
	Result ControlResult
	kind   error
}

func (e *ControlError) Error() string {
	return fmt.Sprintf("%s task %s: %s", e.Result.Action, e.Result.TaskID, e.Result.Error)
}

func (e *ControlError) Unwrap() error { return e.kind }

// ControlTask applies a control action through agentworker_control_task,
// the one implementation apps reach through PostgREST too. The audit event
// is written whatever the outcome; a refused action returns a *ControlError.
func ControlTask(ctx context.Context, db DBTX, id uuid.UUID, action Action, o ControlOpts) (ControlResult, error) {
	var raw []byte
	if err := db.QueryRow(ctx, `SELECT agentworker_control_task($1, $2, $3, nullif($4, ''), nullif($5, ''))`,
		id, string(action), o.ExpectedVersion, o.Actor, o.Answer).Scan(&raw); err != nil {
		return ControlResult{}, fmt.Errorf("%s task %s: %w", action, id, err)
	}
	var res ControlResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return ControlResult{}, fmt.Errorf("%s task %s: decode result %s: %w", action, id, raw, err)
	}
	var kind error
	switch res.Outcome {
	case "applied":
		return res, nil
	case "rejected":
		kind = ErrIllegalTransition
	case "conflict":
		kind = ErrVersionConflict
	case "invalid":
		kind = ErrInvalidAction
	case "not_found":
		kind = ErrTaskNotFound
	default:
		return res, fmt.Errorf("%s task %s: unexpected outcome %q", action, id, res.Outcome)
	}
	return res, &ControlError{Result: res, kind: kind}
}

// CanTransitionSQL asks the database's state machine table whether a task
// status move is legal; sql.CanTransition must agree.
func CanTransitionSQL(ctx context.Context, db DBTX, from, to Status) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agentworker_task_transitions
		WHERE from_status = $1 AND to_status = $2)`, from, to).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up task transition %s -> %s: %w", from, to, err)
	}
	return ok, nil
}

// RunStatus is a task_runs status (orchestrator-mvp.md §5.3).
type RunStatus string

// Run statuses.
const (
	RunQueued         RunStatus = "queued"
	RunRunning        RunStatus = "running"
	RunRetryScheduled RunStatus = "retry_scheduled"
	RunInterrupted    RunStatus = "interrupted"
	RunSucceeded      RunStatus = "succeeded"
	RunFailed         RunStatus = "failed"
	RunCancelled      RunStatus = "cancelled"
)

// RunStatuses lists every run status.
var RunStatuses = []RunStatus{RunQueued, RunRunning, RunRetryScheduled, RunInterrupted, RunSucceeded, RunFailed, RunCancelled}

// CanTransitionRun is the run state machine. The task_runs_guard_status
// trigger enforces the same moves (agentworker_run_transitions) for every
// writer; a test checks that the two agree.
func CanTransitionRun(from, to RunStatus) bool {
	switch from {
	case RunQueued:
		return to == RunRunning || to == RunCancelled
	case RunRunning:
		switch to {
		case RunSucceeded, RunFailed, RunRetryScheduled, RunCancelled, RunInterrupted:
			return true
		}
	case RunRetryScheduled:
		return to == RunRunning || to == RunCancelled
	case RunInterrupted:
		return to == RunRunning || to == RunFailed || to == RunCancelled
	}
	return false
}

// CanTransitionRunSQL asks the database's run state machine table.
func CanTransitionRunSQL(ctx context.Context, db DBTX, from, to RunStatus) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agentworker_run_transitions
		WHERE from_status = $1 AND to_status = $2)`, from, to).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up run transition %s -> %s: %w", from, to, err)
	}
	return ok, nil
}

// AcquireLease gives the task, held by jobID, a lease of d for owner.
// Called in the claim transaction.
func AcquireLease(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, owner string, d time.Duration) error {
	tag, err := db.Exec(ctx, `UPDATE ai_tasks SET lease_owner = $3, lease_expires_at = now() + $4::interval
		WHERE id = $1 AND river_job_id = $2 AND status = 'running'`, id, jobID, owner, d)
	if err != nil {
		return fmt.Errorf("lease task %s to %s: %w", id, owner, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("lease task %s to %s: %w", id, owner, ErrNotClaimed)
	}
	return nil
}

// RenewLease extends the lease of a task still running under jobID. It
// returns ErrNotClaimed when the task was taken over, cancelled or finished.
func RenewLease(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, d time.Duration) error {
	tag, err := db.Exec(ctx, `UPDATE ai_tasks SET lease_expires_at = now() + $3::interval
		WHERE id = $1 AND river_job_id = $2 AND status = 'running'`, id, jobID, d)
	if err != nil {
		return fmt.Errorf("renew lease of task %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease of task %s: %w", id, ErrNotClaimed)
	}
	return nil
}

// Takeover is a running task whose lease lapsed, handed back to the queue.
type Takeover struct {
	TaskID     uuid.UUID
	LeaseOwner string
	LapsedFor  time.Duration
}

// TakeOverLapsed requeues up to limit running tasks whose lease lapsed
// (agentworker_take_over_lapsed): their run becomes interrupted, their old
// job is cancelled, and a new job is enqueued for them.
func TakeOverLapsed(ctx context.Context, db DBTX, limit int) ([]Takeover, error) {
	rows, err := db.Query(ctx, `SELECT task_id, coalesce(lease_owner, ''), lapsed_for FROM agentworker_take_over_lapsed($1)`, limit)
	if err != nil {
		return nil, fmt.Errorf("take over lapsed tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Takeover, error) {
		var t Takeover
		err := row.Scan(&t.TaskID, &t.LeaseOwner, &t.LapsedFor)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("take over lapsed tasks: %w", err)
	}
	return out, nil
}

// AddRunUsage adds spend to a task and its run of attempt: the usage of
// the iterations since the last checkpoint, or of an attempt stopped from
// outside (cancelled).
func AddRunUsage(ctx context.Context, db DBTX, taskID uuid.UUID, attempt int, s Spend) error {
	if s == (Spend{}) {
		return nil
	}
	if _, err := db.Exec(ctx, `WITH r AS (
			UPDATE task_runs SET tokens_in = tokens_in + $3, tokens_out = tokens_out + $4, cost = cost + $5
			WHERE task_id = $1 AND attempt = $2)
		UPDATE ai_tasks SET tokens_in = tokens_in + $3, tokens_out = tokens_out + $4, cost = cost + $5 WHERE id = $1`,
		taskID, attempt, s.TokensIn, s.TokensOut, s.Cost); err != nil {
		return fmt.Errorf("add usage of run %d to task %s: %w", attempt, taskID, err)
	}
	return nil
}

// ReleaseTask hands a task held by jobID back to the queue (running ->
// queued; its run interrupted), for a worker that stops before finishing it,
// and records why on the timeline. The requeue trigger enqueues a fresh job.
// A task no longer held by jobID is left alone and released is false.
func ReleaseTask(ctx context.Context, db DBTX, id uuid.UUID, jobID int64, reason string) (released bool, err error) {
	var n int
	if err := db.QueryRow(ctx, `WITH r AS (
			UPDATE task_runs SET status = 'interrupted', error_code = 'released', error_message = $3, finished_at = now()
			WHERE task_id = $1 AND status = 'running'
			AND EXISTS (SELECT 1 FROM ai_tasks WHERE id = $1 AND river_job_id = $2 AND status = 'running')),
		t AS (
			UPDATE ai_tasks SET status = 'queued', updated_at = now()
			WHERE id = $1 AND river_job_id = $2 AND status = 'running'
			RETURNING id, project_id, type, attempt),
		e AS (
			INSERT INTO agent_events (task_id, project_id, type, payload)
			SELECT id, project_id, 'agent_phase', jsonb_build_object('phase', 'retrying', 'status', 'queued',
				'taskType', type, 'attempt', attempt, 'summary', 'handed back: ' || $3)
			FROM t)
		SELECT count(*) FROM t`, id, jobID, reason).Scan(&n); err != nil {
		return false, fmt.Errorf("release task %s: %w", id, err)
	}
	return n == 1, nil
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
