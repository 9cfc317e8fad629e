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
	// ErrNotClaimed reports that the task is no longer held by the caller's job.
	ErrNotClaimed = errors.New("task is not claimed by this job")
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
// the agentworker_task_transitions table (migration 003).
const (
	StatusQueued        Status = "queued"
	StatusRunning       Status = "running"
	StatusSucceeded     Status = "succeeded"
	StatusFailed        Status = "failed"
	StatusBlocked       Status = "blocked"
	StatusCancelled     Status = "cancelled"
	StatusPaused        Status = "paused"
	StatusAwaitingInput Status = "awaiting_input"
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
		return to == StatusRunning || to == StatusCancelled || to == StatusPaused
	case StatusRunning:
		switch to {
		case StatusSucceeded, StatusFailed, StatusBlocked, StatusCancelled,
			StatusPaused, StatusAwaitingInput, StatusQueued:
			return true
		}
	case StatusPaused, StatusAwaitingInput:
		return to == StatusQueued || to == StatusCancelled
	case StatusFailed, StatusBlocked, StatusCancelled:
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
	Version    int
	CreatedAt  time.Time
	UpdatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
}

const taskColumns = `id, project_id, type, status, coalesce(prompt, ''), input, result, error,
	coalesce(model, ''), attempt, tokens_in, tokens_out, cost::float8, last_seq, river_job_id,
	version, created_at, updated_at, started_at, finished_at`

func scanTask(row pgx.Row) (Task, error) {
	var t Task
	err := row.Scan(&t.ID, &t.ProjectID, &t.Type, &t.Status, &t.Prompt, &t.Input, &t.Result, &t.Error,
		&t.Model, &t.Attempt, &t.TokensIn, &t.TokensOut, &t.Cost, &t.LastSeq, &t.RiverJobID,
		&t.Version, &t.CreatedAt, &t.UpdatedAt, &t.StartedAt, &t.FinishedAt)
	return t, err
}

// NewTask is what an app supplies to create a task.
type NewTask struct {
	ProjectID uuid.UUID
	Type      TaskType
	Prompt    string
	Input     json.RawMessage // nil means {}
	Model     string
}

// InsertTask creates a queued task. The pickup trigger enqueues its River
// job in the same transaction.
func InsertTask(ctx context.Context, db DBTX, nt NewTask) (Task, error) {
	input := nt.Input
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	t, err := scanTask(db.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, input, model)
		VALUES ($1, $2, $3, $4, nullif($5, '')) RETURNING `+taskColumns,
		nt.ProjectID, nt.Type, nt.Prompt, input, nt.Model))
	if err != nil {
		return Task{}, fmt.Errorf("insert %s task for project %s: %w", nt.Type, nt.ProjectID, err)
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

// ClaimTask locks the task row and, when the task is claimable by this job,
// moves it to running and opens a task_runs row for the attempt. A task is
// claimable when queued, or running under this very job (River retrying it
// after a crash). Otherwise claimed is false and nothing changes, so a
// duplicate job is harmless.
func ClaimTask(ctx context.Context, tx pgx.Tx, id uuid.UUID, jobID int64, workerID string) (t Task, claimed bool, err error) {
	t, err = scanTask(tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM ai_tasks WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, false, fmt.Errorf("claim task %s: %w", id, ErrTaskNotFound)
	}
	if err != nil {
		return Task{}, false, fmt.Errorf("claim task %s: %w", id, err)
	}
	sameJob := t.RiverJobID != nil && *t.RiverJobID == jobID
	if t.Status != StatusQueued && !(t.Status == StatusRunning && sameJob) {
		return t, false, nil
	}
	t, err = scanTask(tx.QueryRow(ctx, `UPDATE ai_tasks SET status = 'running', attempt = attempt + 1,
		river_job_id = $2, started_at = coalesce(started_at, now()), finished_at = NULL,
		updated_at = now(), version = version + 1
		WHERE id = $1 RETURNING `+taskColumns, id, jobID))
	if err != nil {
		return Task{}, false, fmt.Errorf("claim task %s: mark running: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE task_runs SET status = 'interrupted', finished_at = now()
		WHERE task_id = $1 AND status = 'running'`, id); err != nil {
		return Task{}, false, fmt.Errorf("claim task %s: close interrupted runs: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO task_runs (task_id, attempt, idempotency_key, river_job_id, worker_id, status, started_at)
		VALUES ($1, $2, $3, $4, $5, 'running', now())`,
		id, t.Attempt, fmt.Sprintf("%s/%d", id, t.Attempt), jobID, workerID); err != nil {
		return Task{}, false, fmt.Errorf("claim task %s: open run %d: %w", id, t.Attempt, err)
	}
	return t, true, nil
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
	Model     string
}

// FinishTask closes the current attempt of a task held by jobID: it moves the
// task through the state machine and closes its run row. ErrNotClaimed means
// another job took the task over (or someone cancelled it) meanwhile.
func FinishTask(ctx context.Context, tx pgx.Tx, id uuid.UUID, jobID int64, o Outcome) (Task, error) {
	var from Status
	var holder *int64
	err := tx.QueryRow(ctx, `SELECT status, river_job_id FROM ai_tasks WHERE id = $1 FOR UPDATE`, id).Scan(&from, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("finish task %s: %w", id, ErrTaskNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("finish task %s: %w", id, err)
	}
	if holder == nil || *holder != jobID || from != StatusRunning {
		return Task{}, fmt.Errorf("finish task %s as %s (status %s): %w", id, o.Status, from, ErrNotClaimed)
	}
	if !CanTransition(from, o.Status) {
		return Task{}, fmt.Errorf("finish task %s: %s -> %s: %w", id, from, o.Status, ErrIllegalTransition)
	}
	finished := o.Status.Terminal()
	t, err := scanTask(tx.QueryRow(ctx, `UPDATE ai_tasks SET status = $2, result = coalesce($3, result),
		error = $4, tokens_in = tokens_in + $5, tokens_out = tokens_out + $6, cost = cost + $7,
		model = coalesce(nullif($8, ''), model),
		finished_at = CASE WHEN $9 THEN now() END, updated_at = now(), version = version + 1
		WHERE id = $1 RETURNING `+taskColumns,
		id, o.Status, nullJSON(o.Result), nullJSON(o.Error), o.TokensIn, o.TokensOut, o.Cost, o.Model, finished))
	if err != nil {
		return Task{}, fmt.Errorf("finish task %s as %s: %w", id, o.Status, err)
	}
	// Usage is added: checkpoints counted the earlier iterations already.
	if _, err := tx.Exec(ctx, `UPDATE task_runs SET status = $3, tokens_in = tokens_in + $4, tokens_out = tokens_out + $5, cost = cost + $6,
		error_code = nullif($7, ''), error_message = nullif($8, ''), finished_at = now()
		WHERE task_id = $1 AND attempt = $2`,
		id, t.Attempt, o.RunStatus, o.TokensIn, o.TokensOut, o.Cost, o.ErrorCode, o.ErrorMsg); err != nil {
		return Task{}, fmt.Errorf("finish task %s: close run %d: %w", id, t.Attempt, err)
	}
	return t, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// OrphanedTasks returns queued tasks older than minAge that have no live
// River job: the pickup trigger's work was lost (for example, rows copied in
// with triggers disabled). The reconciler enqueues them.
func OrphanedTasks(ctx context.Context, db DBTX, minAge time.Duration, limit int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT t.id FROM ai_tasks t
		WHERE t.status = 'queued' AND t.created_at < now() - $1::interval
		AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = 'ai_task' AND j.args ->> 'task_id' = t.id::text
			AND j.state NOT IN ('completed', 'cancelled', 'discarded'))
		ORDER BY t.created_at LIMIT $2`, minAge, limit)
	if err != nil {
		return nil, fmt.Errorf("find orphaned tasks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("find orphaned tasks: %w", err)
	}
	return ids, nil
}

// RetryRun marks an attempt's run as waiting for River's retry.
// The spend not yet counted is added to the run and the task.
func RetryRun(ctx context.Context, db DBTX, taskID uuid.UUID, attempt int, code, msg string, spend Spend) error {
	if err := AddRunUsage(ctx, db, taskID, attempt, spend); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `UPDATE task_runs SET status = 'retry_scheduled', next_retry_at = now(),
		error_code = $3, error_message = $4, finished_at = now()
		WHERE task_id = $1 AND attempt = $2`, taskID, attempt, code, msg); err != nil {
		return fmt.Errorf("mark run %d of task %s retry_scheduled: %w", attempt, taskID, err)
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
