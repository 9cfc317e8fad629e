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

// LockTaskArchive takes the task's archiving lock until tx ends, so that
// two archivers never write one task's archive at once, and reads its
// archive state: ErrTaskNotFound for a missing task. The lock is an
// advisory one, not the task row's: a transaction that only reads and
// takes advisory locks has no xid, so one held through an archive's upload
// neither holds back project streams (which wait for every older xid, see
// ProjectEventsAfter) nor blocks the task's own writers.
func LockTaskArchive(ctx context.Context, tx pgx.Tx, taskID uuid.UUID) (TaskArchive, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2::uuid::text))`, archiveLockClass, taskID); err != nil {
		return TaskArchive{TaskID: taskID}, fmt.Errorf("lock the archive of task %s: %w", taskID, err)
	}
	return taskArchive(ctx, tx, taskID, ``)
}

// archiveLockClass is the first key of the archiving locks (two-key
// advisory locks, apart from the one-key ones Migrate and River take).
const archiveLockClass int32 = 0x61726368 // "arch"

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

// ErrArchivedMeanwhile reports a mark refused because the task's archive
// mark moved since it was read.
var ErrArchivedMeanwhile = errors.New("task archived meanwhile")

// MarkTaskArchived records that the archive at key holds the task's events
// through seq, if the mark still says through prev (else
// ErrArchivedMeanwhile). The columns are the worker's
// (ai_tasks_guard_columns): the statement says it is the worker's write.
func MarkTaskArchived(ctx context.Context, db DBTX, taskID uuid.UUID, key string, prev, seq int) error {
	tag, err := db.Exec(ctx, `UPDATE ai_tasks SET events_archive_key = $2, events_archived_seq = $4, events_archived_at = now()
		WHERE id = $1 AND events_archived_seq = $3 AND set_config('agentworker.machine', 'on', true) IS NOT NULL`, taskID, key, prev, seq)
	if err != nil {
		return fmt.Errorf("mark task %s archived through seq %d at %q: %w", taskID, seq, key, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := ReadTaskArchive(ctx, db, taskID); err != nil {
			return fmt.Errorf("mark task %s archived through seq %d: %w", taskID, seq, err)
		}
		return fmt.Errorf("mark task %s archived through seq %d, from %d: %w", taskID, seq, prev, ErrArchivedMeanwhile)
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
