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

// Checkpoint is a task's task_checkpoints row: its conversation and loop
// state after the last finished iteration (migration 005).
type Checkpoint struct {
	TaskID    uuid.UUID
	Attempt   int
	Iteration int
	Messages  json.RawMessage
	State     json.RawMessage
	UpdatedAt time.Time
}

// Spend is usage not yet counted on a task and its run.
type Spend struct {
	TokensIn  int64
	TokensOut int64
	Cost      float64
}

// SaveCheckpoint writes the checkpoint of a task held by jobID and adds
// spend to the task and its current run, in db (the transaction of the
// iteration's events). It returns ErrNotClaimed when the task is no longer
// held by jobID: a stale attempt never overwrites the checkpoint of the one
// that took over.
func SaveCheckpoint(ctx context.Context, db DBTX, jobID int64, cp Checkpoint, spend Spend) error {
	var one int
	err := db.QueryRow(ctx, `SELECT 1 FROM ai_tasks
		WHERE id = $1 AND river_job_id = $2 AND status = 'running' FOR UPDATE`, cp.TaskID, jobID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("checkpoint task %s: %w", cp.TaskID, ErrNotClaimed)
	}
	if err != nil {
		return fmt.Errorf("checkpoint task %s: %w", cp.TaskID, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO task_checkpoints (task_id, attempt, iteration, messages, state)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, iteration = excluded.iteration,
			messages = excluded.messages, state = excluded.state, updated_at = now()`,
		cp.TaskID, cp.Attempt, cp.Iteration, cp.Messages, cp.State); err != nil {
		return fmt.Errorf("checkpoint task %s at iteration %d: %w", cp.TaskID, cp.Iteration, err)
	}
	return AddRunUsage(ctx, db, cp.TaskID, cp.Attempt, spend)
}

// LoadCheckpoint returns a task's checkpoint; ok is false when it has none
// (a fresh task, or one retried after it ended).
func LoadCheckpoint(ctx context.Context, db DBTX, taskID uuid.UUID) (cp Checkpoint, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT task_id, attempt, iteration, messages, state, updated_at
		FROM task_checkpoints WHERE task_id = $1`, taskID).
		Scan(&cp.TaskID, &cp.Attempt, &cp.Iteration, &cp.Messages, &cp.State, &cp.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("load checkpoint of task %s: %w", taskID, err)
	}
	return cp, true, nil
}
