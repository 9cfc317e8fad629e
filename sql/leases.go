package sql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RenewLease extends the lease of the task held by f. It returns ErrFenced
// when the task was taken over, cancelled or finished.
func RenewLease(ctx context.Context, db DBTX, f Fence, d time.Duration) error {
	// The renewal is the worker's: it may move the lease (migration 102).
	tag, err := db.Exec(ctx, `UPDATE ai_tasks SET lease_expires_at = now() + $3::interval
		WHERE id = $1 AND fence = $2 AND status = 'running'
		AND set_config('agentworker.machine', 'on', true) IS NOT NULL`, f.TaskID, f.Epoch, d)
	if err != nil {
		return fmt.Errorf("renew lease of task %s: %w", f.TaskID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease of task %s: %w", f.TaskID, ErrFenced)
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

// ReleaseTask hands the task held by f back to the queue (running ->
// queued; its run interrupted), for a worker that stops before finishing
// it, and records why on the timeline. The requeue trigger enqueues a fresh
// job. A task no longer held by f is left alone and released is false.
func ReleaseTask(ctx context.Context, db DBTX, f Fence, reason string) (released bool, err error) {
	var n int
	// requeue is evaluated before the task row is updated (the update's
	// WHERE needs it), so the guard trigger sees the hand-back flag.
	if err := db.QueryRow(ctx, `WITH `+fenceCTE+`,
		requeue AS (SELECT set_config('agentworker.requeue', 'on', true) AS flag),
		r AS (
			UPDATE task_runs SET status = 'interrupted', error_code = 'released', error_message = $3, finished_at = now()
			WHERE task_id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM fence)),
		t AS (
			UPDATE ai_tasks SET status = 'queued', updated_at = now()
			WHERE id = $1 AND EXISTS (SELECT 1 FROM fence) AND (SELECT flag FROM requeue) IS NOT NULL
			RETURNING id, project_id, type, attempt),
		e AS (
			INSERT INTO agent_events (task_id, project_id, type, payload)
			SELECT id, project_id, 'agent_phase', jsonb_build_object('phase', 'retrying', 'status', 'queued',
				'taskType', type, 'attempt', attempt, 'summary', 'handed back: ' || $3)
			FROM t)
		SELECT count(*) FROM t`, f.TaskID, f.Epoch, reason).Scan(&n); err != nil {
		return false, fmt.Errorf("release task %s: %w", f.TaskID, err)
	}
	return n == 1, nil
}

// Fence is a holder's claim on a task: the task and the lease epoch
// (ai_tasks.fence) its claim returned. Every write a holder makes carries
// it and is refused, in the same statement, once the task was claimed
// again, taken over, cancelled or finished: the statement locks the task
// row only while fence and status still match, and writes nothing
// otherwise. A holder that gets ErrFenced stops without writing anything
// more.
type Fence struct {
	TaskID uuid.UUID
	Epoch  int64
}

// ErrFenced reports a write refused because the writer no longer holds the task.
var ErrFenced = errors.New("task is no longer held by this attempt (stale fence)")

// fenceCTE is the common table expression every fenced statement starts
// with, $1 the task and $2 the epoch. It locks the task row (as the event
// seq trigger does) so that a takeover, cancel or finish waits for the
// write or refuses it, never interleaves with it.
const fenceCTE = `fence AS (SELECT 1 FROM ai_tasks WHERE id = $1 AND fence = $2 AND status = 'running' FOR NO KEY UPDATE)`

// fenced runs ctes, common table expressions that write only where
// EXISTS (SELECT 1 FROM fence), the last named w and returning a row per
// row written, with f as $1 and $2 and args from $3. It returns the rows
// written, or ErrFenced.
func fenced(ctx context.Context, db DBTX, f Fence, ctes string, args ...any) (int64, error) {
	return fencedResult(db.QueryRow(ctx, fencedStatement(ctes), append([]any{f.TaskID, f.Epoch}, args...)...))
}

// queueFenced queues fenced's statement in p; read gets its result.
func queueFenced(p *Pipeline, f Fence, ctes string, read func(n int64, err error) error, args ...any) {
	p.batch.Queue(fencedStatement(ctes), append([]any{f.TaskID, f.Epoch}, args...)...).QueryRow(func(row pgx.Row) error {
		return read(fencedResult(row))
	})
}

func fencedStatement(ctes string) string {
	return `WITH ` + fenceCTE + `, ` + ctes + `
		SELECT EXISTS (SELECT 1 FROM fence), (SELECT count(*) FROM w)`
}

func fencedResult(row pgx.Row) (int64, error) {
	var held bool
	var n int64
	if err := row.Scan(&held, &n); err != nil {
		return 0, err
	}
	if !held {
		return 0, ErrFenced
	}
	return n, nil
}

// CheckFence reports ErrFenced when f no longer holds its task, and the
// time left on the task's lease otherwise.
func CheckFence(ctx context.Context, db DBTX, f Fence) (time.Duration, error) {
	var left *time.Duration
	err := db.QueryRow(ctx, `SELECT lease_expires_at - now() FROM ai_tasks WHERE id = $1 AND fence = $2 AND status = 'running'`,
		f.TaskID, f.Epoch).Scan(&left)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("check fence %d of task %s: %w", f.Epoch, f.TaskID, ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("check fence %d of task %s: %w", f.Epoch, f.TaskID, err)
	}
	if left == nil {
		return 0, nil
	}
	return *left, nil
}
