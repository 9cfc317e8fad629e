package sql

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// RunStatus is a task_runs status; CanTransitionRun says which moves are legal.
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

// AddRunUsage adds spend to the task held by f and to its current run: the
// usage of the iterations since the last checkpoint, or of an attempt
// stopped from outside by a cancel. It is fenced like every other write:
// it goes through while f holds the running task, and after a cancel of
// that same attempt (the task cancelled, its run cancelled, no claim
// since), whose spend is the attempt's own; a holder whose task was taken
// over (queued, or running under another fence) gets ErrFenced and adds
// nothing.
func AddRunUsage(ctx context.Context, db DBTX, f Fence, s Spend) error {
	if s == (Spend{}) {
		return nil
	}
	var n int
	if err := db.QueryRow(ctx, `WITH t AS (
			UPDATE ai_tasks t SET tokens_in = tokens_in + $3, tokens_out = tokens_out + $4, cost = cost + $5
			WHERE t.id = $1 AND t.fence = $2 AND (t.status = 'running' OR t.status = 'cancelled' AND EXISTS (
				SELECT 1 FROM task_runs r WHERE r.task_id = t.id AND r.attempt = t.attempt AND r.status = 'cancelled'))
			RETURNING attempt),
		r AS (UPDATE task_runs r SET tokens_in = tokens_in + $3, tokens_out = tokens_out + $4, cost = cost + $5,
				rate_limit_wait_ms = rate_limit_wait_ms + $6
			FROM t WHERE r.task_id = $1 AND r.attempt = t.attempt)
		SELECT count(*) FROM t`,
		f.TaskID, f.Epoch, s.TokensIn, s.TokensOut, s.Cost, s.RateWait.Milliseconds()).Scan(&n); err != nil {
		return fmt.Errorf("add usage to task %s: %w", f.TaskID, err)
	}
	if n == 0 {
		return fmt.Errorf("add usage to task %s: %w", f.TaskID, ErrFenced)
	}
	return nil
}

// RunID returns the id of a task's run of an attempt.
func RunID(ctx context.Context, db DBTX, taskID uuid.UUID, attempt int) (uuid.UUID, error) {
	var id uuid.UUID
	if err := db.QueryRow(ctx, `SELECT id FROM task_runs WHERE task_id = $1 AND attempt = $2`, taskID, attempt).Scan(&id); err != nil {
		return uuid.Nil, fmt.Errorf("find run %d of task %s: %w", attempt, taskID, err)
	}
	return id, nil
}
