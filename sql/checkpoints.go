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
// state after the last finished iteration (task_checkpoints).
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
	// RateWait is the time the model calls waited for the provider's rate
	// limit; the run counts it (task_runs.rate_limit_wait_ms).
	RateWait time.Duration
}

// SaveCheckpoint writes the checkpoint of the task held by f, records the
// change set as it stands (RewindChangeSet puts it back), and adds spend
// to the task and its current run, in one statement in db (the
// transaction of the iteration's events). It returns whether a pause was
// requested, read under the same row lock: the loop's next iteration
// boundary needs no query of its own. It returns ErrFenced when f no
// longer holds the task: a stale attempt never overwrites the checkpoint
// of the one that took over.
func SaveCheckpoint(ctx context.Context, db DBTX, f Fence, cp Checkpoint, spend Spend) (pauseRequested bool, err error) {
	query, args := saveCheckpointStatement(f, cp, spend)
	var held bool
	if err := db.QueryRow(ctx, query, args...).Scan(&held, &pauseRequested, nil); err != nil {
		return false, fmt.Errorf("checkpoint task %s at iteration %d: %w", f.TaskID, cp.Iteration, err)
	}
	return pauseRequested, checkpointHeld(f, cp, held)
}

// CheckpointRead is what a checkpoint's statement read under its task row
// lock.
type CheckpointRead struct {
	// PauseRequested: a pause was requested of the task.
	PauseRequested bool
	// ProjectCapped: the task's project has a daily cost cap of its own.
	// Its spend is not read there: a read in the checkpoint's transaction
	// misses what the other tasks are committing at that moment.
	ProjectCapped bool
}

// QueueSaveCheckpoint queues SaveCheckpoint's statement in p; once p ran,
// *read holds what it read.
func QueueSaveCheckpoint(p *Pipeline, f Fence, cp Checkpoint, spend Spend, read *CheckpointRead) {
	query, args := saveCheckpointStatement(f, cp, spend)
	p.batch.Queue(query, args...).QueryRow(func(row pgx.Row) error {
		var held bool
		if err := row.Scan(&held, &read.PauseRequested, &read.ProjectCapped); err != nil {
			return fmt.Errorf("checkpoint task %s at iteration %d: %w", f.TaskID, cp.Iteration, err)
		}
		return checkpointHeld(f, cp, held)
	})
}

func checkpointHeld(f Fence, cp Checkpoint, held bool) error {
	if !held {
		return fmt.Errorf("checkpoint task %s at iteration %d: %w", f.TaskID, cp.Iteration, ErrFenced)
	}
	return nil
}

func saveCheckpointStatement(f Fence, cp Checkpoint, spend Spend) (string, []any) {
	// The spend's update of the task row is the fence: it locks the row
	// while the holder holds it. Data-modifying CTEs all run, read or not.
	// Only entries changed since the last checkpoint are copied.
	return `WITH fence AS (
			UPDATE ai_tasks SET tokens_in = tokens_in + $7, tokens_out = tokens_out + $8, cost = cost + $9
			WHERE id = $1 AND fence = $2 AND status = 'running'
			RETURNING attempt, pause_requested, project_id),
		w AS (INSERT INTO task_checkpoints (task_id, attempt, iteration, messages, state)
			SELECT $1, $3, $4, $5, $6 FROM fence
			ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, iteration = excluded.iteration,
				messages = excluded.messages, state = excluded.state, updated_at = now()
			RETURNING 1),
		entries AS (UPDATE change_set_entries SET cp = true, cp_op = op, cp_content = content, cp_from_path = from_path
			WHERE task_id = $1 AND EXISTS (SELECT 1 FROM fence)
			AND (NOT cp OR cp_op IS DISTINCT FROM op OR cp_from_path IS DISTINCT FROM from_path
				OR cp_content IS DISTINCT FROM content)
			RETURNING 1),
		r AS (UPDATE task_runs r SET tokens_in = r.tokens_in + $7, tokens_out = r.tokens_out + $8, cost = r.cost + $9,
				rate_limit_wait_ms = r.rate_limit_wait_ms + $10
			FROM fence WHERE r.task_id = $1 AND r.attempt = fence.attempt AND ($7 <> 0 OR $8 <> 0 OR $9 <> 0 OR $10 <> 0) RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM fence), coalesce((SELECT pause_requested FROM fence), false),
			EXISTS (SELECT 1 FROM project_settings s JOIN fence ON s.project_id = fence.project_id WHERE s.max_cost_usd_per_day IS NOT NULL)`,
		[]any{f.TaskID, f.Epoch, cp.Attempt, cp.Iteration, JSONB(cp.Messages), JSONB(cp.State),
			spend.TokensIn, spend.TokensOut, spend.Cost, spend.RateWait.Milliseconds()}
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
