package sql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TaskArchive is what a task row says of its archived timeline (migration
// 011): Key is "" and Seq 0 until it is archived.
type TaskArchive struct {
	TaskID    uuid.UUID
	ProjectID uuid.UUID
	Status    Status
	Key       string
	Seq       int // the last seq the archive holds
	At        time.Time
}

// LockTaskArchive reads a task's archive state and locks its row until tx
// ends, so that the task neither moves (a retry) nor gets events (they take
// their seq under this lock) while its timeline is archived. It returns
// ErrTaskNotFound for a missing task.
func LockTaskArchive(ctx context.Context, tx pgx.Tx, taskID uuid.UUID) (TaskArchive, error) {
	return taskArchive(ctx, tx, taskID, ` FOR UPDATE`)
}

// ReadTaskArchive reads a task's archive state: ErrTaskNotFound for a
// missing task.
func ReadTaskArchive(ctx context.Context, db DBTX, taskID uuid.UUID) (TaskArchive, error) {
	return taskArchive(ctx, db, taskID, ``)
}

func taskArchive(ctx context.Context, db DBTX, taskID uuid.UUID, lock string) (TaskArchive, error) {
	a := TaskArchive{TaskID: taskID}
	var key *string
	var at *time.Time
	err := db.QueryRow(ctx, `SELECT project_id, status, events_archive_key, events_archived_seq, events_archived_at
		FROM ai_tasks WHERE id = $1`+lock, taskID).Scan(&a.ProjectID, &a.Status, &key, &a.Seq, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("read archive state of task %s: %w", taskID, ErrTaskNotFound)
	}
	if err != nil {
		return a, fmt.Errorf("read archive state of task %s: %w", taskID, err)
	}
	if key != nil {
		a.Key = *key
	}
	if at != nil {
		a.At = *at
	}
	return a, nil
}

// MarkTaskArchived records that the archive at key holds the task's events
// through seq. The columns are the worker's (ai_tasks_guard_columns): the
// statement says it is the worker's write.
func MarkTaskArchived(ctx context.Context, db DBTX, taskID uuid.UUID, key string, seq int) error {
	tag, err := db.Exec(ctx, `UPDATE ai_tasks SET events_archive_key = $2, events_archived_seq = $3, events_archived_at = now()
		WHERE id = $1 AND set_config('agentworker.machine', 'on', true) IS NOT NULL`, taskID, key, seq)
	if err != nil {
		return fmt.Errorf("mark task %s archived through seq %d at %q: %w", taskID, seq, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark task %s archived through seq %d: %w", taskID, seq, ErrTaskNotFound)
	}
	return nil
}

// ArchivedTaskKeys returns the archive keys of those of the tasks that have
// one, by task.
func ArchivedTaskKeys(ctx context.Context, db DBTX, taskIDs []uuid.UUID) (map[uuid.UUID]string, error) {
	rows, err := db.Query(ctx, `SELECT id, events_archive_key FROM ai_tasks
		WHERE id = ANY($1) AND events_archive_key IS NOT NULL`, taskIDs)
	if err != nil {
		return nil, fmt.Errorf("read archive keys of %d tasks: %w", len(taskIDs), err)
	}
	keys := map[uuid.UUID]string{}
	var id uuid.UUID
	var key string
	_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error {
		keys[id] = key
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read archive keys of %d tasks: %w", len(taskIDs), err)
	}
	return keys, nil
}
