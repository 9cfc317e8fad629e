package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

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
