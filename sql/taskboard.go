package sql

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BoardTask is one task as a project's task list shows it.
type BoardTask struct {
	ID         uuid.UUID
	Type       TaskType
	Status     Status
	Prompt     string // the first 500 characters
	Priority   int
	Agent      string // the agent's name, if any
	DependsOn  []uuid.UUID
	Summary    string // a finished task's result summary
	Error      string // a failed or blocked task's error message
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// TaskBoard is a project's task list: the count of every status, the
// unfinished tasks (up to maxOpen, most urgent first) and the most recently
// finished ones (up to maxDone).
type TaskBoard struct {
	Counts map[Status]int
	Open   []BoardTask
	Done   []BoardTask
}

// ReadTaskBoard reads a project's task list.
func ReadTaskBoard(ctx context.Context, db DBTX, projectID uuid.UUID, maxOpen, maxDone int) (TaskBoard, error) {
	b := TaskBoard{Counts: map[Status]int{}}
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM ai_tasks WHERE project_id = $1 GROUP BY status`, projectID)
	if err != nil {
		return b, fmt.Errorf("count the tasks of project %s: %w", projectID, err)
	}
	var status Status
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { b.Counts[status] = n; return nil }); err != nil {
		return b, fmt.Errorf("count the tasks of project %s: %w", projectID, err)
	}
	read := func(finished bool, order string, limit int) ([]BoardTask, error) {
		rows, err := db.Query(ctx, `SELECT t.id, t.type, t.status, left(coalesce(t.prompt, ''), 500), t.priority, coalesce(a.name, ''),
				coalesce((SELECT array_agg(d.depends_on_task_id ORDER BY d.created_at) FROM task_dependencies d WHERE d.task_id = t.id), '{}'),
				coalesce(t.result ->> 'summary', ''), coalesce(t.error ->> 'message', ''), t.created_at, t.finished_at
			FROM ai_tasks t LEFT JOIN agents a ON a.id = t.agent_id
			WHERE t.project_id = $1 AND (t.status IN ('succeeded', 'failed', 'blocked', 'cancelled')) = $2
			ORDER BY `+order+` LIMIT $3`, projectID, finished, limit)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BoardTask, error) {
			var t BoardTask
			err := r.Scan(&t.ID, &t.Type, &t.Status, &t.Prompt, &t.Priority, &t.Agent, &t.DependsOn, &t.Summary, &t.Error, &t.CreatedAt, &t.FinishedAt)
			return t, err
		})
	}
	if b.Open, err = read(false, "t.priority, t.created_at, t.id", maxOpen); err != nil {
		return b, fmt.Errorf("read the open tasks of project %s: %w", projectID, err)
	}
	if b.Done, err = read(true, "t.finished_at DESC NULLS LAST, t.id", maxDone); err != nil {
		return b, fmt.Errorf("read the finished tasks of project %s: %w", projectID, err)
	}
	return b, nil
}

// ChangedTaskBoards returns, in tx, the projects whose tasks changed status
// since the renderer's cursor, and moves the cursor to the snapshot's xmin:
// a transaction still running when tx began has an xid at or above it, so
// a change it commits later is read by the next call, never skipped (one
// seen now and again then is rendered twice, the same). The cursor row
// stays locked until tx ends, so renderers take turns; ok is false when
// another renderer holds it.
func ChangedTaskBoards(ctx context.Context, tx pgx.Tx) (projects []uuid.UUID, ok bool, err error) {
	var cursor, upto string
	err = tx.QueryRow(ctx, `SELECT xid::text, pg_snapshot_xmin(pg_current_snapshot())::text
		FROM tasks_md_cursor FOR UPDATE SKIP LOCKED`).Scan(&cursor, &upto)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the tasks.md cursor: %w", err)
	}
	// Only the days not sealed below the cursor can hold a change after it.
	xid, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("read the tasks.md cursor %q: %w", cursor, err)
	}
	floor, err := eventFloor(ctx, tx, &xid, nil)
	if err != nil {
		return nil, false, fmt.Errorf("read the projects changed since %s: %w", cursor, err)
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT project_id FROM agent_events
		WHERE type = 'agent_phase' AND xid >= $1::xid8 AND created_at >= $2`, pgx.QueryExecModeCacheDescribe, cursor, floor)
	if err != nil {
		return nil, false, fmt.Errorf("read the projects changed since %s: %w", cursor, err)
	}
	if projects, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
		return nil, false, fmt.Errorf("read the projects changed since %s: %w", cursor, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE tasks_md_cursor SET xid = $1::xid8`, upto); err != nil {
		return nil, false, fmt.Errorf("move the tasks.md cursor to %s: %w", upto, err)
	}
	return projects, true, nil
}
