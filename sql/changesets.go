package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Change set statuses (migration 004).
const (
	ChangeSetOpen      = "open"
	ChangeSetApplying  = "applying"
	ChangeSetApplied   = "applied"
	ChangeSetDiscarded = "discarded"
)

// Change set entry operations.
const (
	ChangeWrite  = "write"
	ChangeDelete = "delete"
)

// ChangeEntry is the pending state of one path of a build's change set.
type ChangeEntry struct {
	Path     string
	Op       string // ChangeWrite or ChangeDelete
	Content  []byte // for ChangeWrite
	FromPath string // set on the target of a move
	BaseETag string // version the change was made against; "" = did not exist
	Ord      int
	Applied  bool
}

// OpenChangeSet creates the change set of a build task, or returns the
// status of the one that exists (a retried attempt).
func OpenChangeSet(ctx context.Context, db DBTX, taskID, projectID uuid.UUID) (string, error) {
	var status string
	err := db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO change_sets (task_id, project_id) VALUES ($1, $2)
			ON CONFLICT (task_id) DO NOTHING RETURNING status)
		SELECT status FROM ins UNION ALL SELECT status FROM change_sets WHERE task_id = $1 LIMIT 1`,
		taskID, projectID).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("open change set of task %s: %w", taskID, err)
	}
	return status, nil
}

// ResetChangeSet empties a task's change set (and its recorded decisions)
// and reopens it, for a build that starts over.
func ResetChangeSet(ctx context.Context, db DBTX, taskID uuid.UUID) error {
	// One statement: every build starts with it, most with nothing to reset.
	if _, err := db.Exec(ctx, `WITH entries AS (DELETE FROM change_set_entries WHERE task_id = $1),
			decisions AS (DELETE FROM build_decisions WHERE task_id = $1)
		UPDATE change_sets SET status = 'open', result = NULL, updated_at = now() WHERE task_id = $1`, taskID); err != nil {
		return fmt.Errorf("reset change set and decisions of task %s: %w", taskID, err)
	}
	return nil
}

const entryColumns = `path, op, content, coalesce(from_path, ''), base_etag, ord, applied`

func scanEntry(row pgx.Row) (ChangeEntry, error) {
	var e ChangeEntry
	err := row.Scan(&e.Path, &e.Op, &e.Content, &e.FromPath, &e.BaseETag, &e.Ord, &e.Applied)
	return e, err
}

// GetChangeEntry returns the pending entry of a path; ok is false when the
// change set does not touch it.
func GetChangeEntry(ctx context.Context, db DBTX, taskID uuid.UUID, path string) (e ChangeEntry, ok bool, err error) {
	e, err = scanEntry(db.QueryRow(ctx, `SELECT `+entryColumns+` FROM change_set_entries WHERE task_id = $1 AND path = $2`, taskID, path))
	if errors.Is(err, pgx.ErrNoRows) {
		return ChangeEntry{}, false, nil
	}
	if err != nil {
		return ChangeEntry{}, false, fmt.Errorf("get change of %q in task %s: %w", path, taskID, err)
	}
	return e, true, nil
}

// ListChangeEntries returns a task's change set in the order of first change.
func ListChangeEntries(ctx context.Context, db DBTX, taskID uuid.UUID) ([]ChangeEntry, error) {
	rows, err := db.Query(ctx, `SELECT `+entryColumns+` FROM change_set_entries WHERE task_id = $1 ORDER BY ord`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list change set of task %s: %w", taskID, err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChangeEntry, error) { return scanEntry(r) })
	if err != nil {
		return nil, fmt.Errorf("list change set of task %s: %w", taskID, err)
	}
	return entries, nil
}

// PutChangeEntry stages the new state of a path. An existing entry keeps
// its base version and order: the change is still against what the path
// was when the build first touched it.
func PutChangeEntry(ctx context.Context, db DBTX, taskID uuid.UUID, e ChangeEntry) error {
	var content any
	if e.Op == ChangeWrite {
		content = e.Content
		if content == nil {
			content = []byte{}
		}
	}
	_, err := db.Exec(ctx, `INSERT INTO change_set_entries (task_id, path, op, content, from_path, base_etag, ord)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6,
			(SELECT coalesce(max(ord), 0) + 1 FROM change_set_entries WHERE task_id = $1))
		ON CONFLICT (task_id, path) DO UPDATE SET op = excluded.op, content = excluded.content,
			from_path = excluded.from_path, applied = false, updated_at = now()`,
		taskID, e.Path, e.Op, content, e.FromPath, e.BaseETag)
	if err != nil {
		return fmt.Errorf("stage %s of %q in task %s: %w", e.Op, e.Path, taskID, err)
	}
	return nil
}

// DropChangeEntry removes a path from the change set: the build's changes
// to it cancelled out (a file created, then deleted).
func DropChangeEntry(ctx context.Context, db DBTX, taskID uuid.UUID, path string) error {
	if _, err := db.Exec(ctx, `DELETE FROM change_set_entries WHERE task_id = $1 AND path = $2`, taskID, path); err != nil {
		return fmt.Errorf("drop change of %q in task %s: %w", path, taskID, err)
	}
	return nil
}

// ChangeSetState returns the status and stored result of a task's change set.
func ChangeSetState(ctx context.Context, db DBTX, taskID uuid.UUID) (status string, result json.RawMessage, err error) {
	err = db.QueryRow(ctx, `SELECT status, result FROM change_sets WHERE task_id = $1`, taskID).Scan(&status, &result)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("get change set of task %s: %w", taskID, err)
	}
	return status, result, nil
}

// MarkChangeSetApplying commits the decision to apply a task's change set,
// with the result the task will have once it is applied. From here on the
// set is finished, never discarded, even after a crash.
func MarkChangeSetApplying(ctx context.Context, db DBTX, taskID uuid.UUID, result json.RawMessage) error {
	tag, err := db.Exec(ctx, `UPDATE change_sets SET status = 'applying', result = $2, updated_at = now()
		WHERE task_id = $1 AND status IN ('open', 'applying')`, taskID, result)
	if err != nil {
		return fmt.Errorf("mark change set of task %s applying: %w", taskID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("mark change set of task %s applying: no open change set", taskID)
	}
	return nil
}

// MarkChangeEntryApplied records that one entry reached storage.
func MarkChangeEntryApplied(ctx context.Context, db DBTX, taskID uuid.UUID, path string) error {
	if _, err := db.Exec(ctx, `UPDATE change_set_entries SET applied = true, updated_at = now()
		WHERE task_id = $1 AND path = $2`, taskID, path); err != nil {
		return fmt.Errorf("mark change of %q in task %s applied: %w", path, taskID, err)
	}
	return nil
}

// FinishChangeSet moves a task's change set to applied or discarded. A
// discarded set drops its entries (their content is no longer needed); a
// set already applying is left alone.
func FinishChangeSet(ctx context.Context, db DBTX, taskID uuid.UUID, status string) error {
	if status != ChangeSetApplied && status != ChangeSetDiscarded {
		return fmt.Errorf("finish change set of task %s: status %q is not final", taskID, status)
	}
	if status == ChangeSetDiscarded {
		if _, err := db.Exec(ctx, `DELETE FROM change_set_entries e USING change_sets s
			WHERE e.task_id = $1 AND s.task_id = e.task_id AND s.status = 'open'`, taskID); err != nil {
			return fmt.Errorf("discard change set of task %s: %w", taskID, err)
		}
	}
	// A set being applied is never discarded: it is finished by Resume.
	if _, err := db.Exec(ctx, `UPDATE change_sets SET status = $2, updated_at = now()
		WHERE task_id = $1 AND (status = 'open' OR $2 = 'applied')`, taskID, status); err != nil {
		return fmt.Errorf("finish change set of task %s as %s: %w", taskID, status, err)
	}
	return nil
}

// Decision outcomes of a plan-driven build step.
const (
	DecisionAccepted = "accepted"
	DecisionRejected = "rejected"
)

// RecordDecision records the outcome of a build step by its decision id.
// recorded is false when the decision was already recorded: it ran before.
func RecordDecision(ctx context.Context, db DBTX, taskID uuid.UUID, decisionID, status string, outcome json.RawMessage) (recorded bool, err error) {
	if len(outcome) == 0 {
		outcome = json.RawMessage(`{}`)
	}
	tag, err := db.Exec(ctx, `INSERT INTO build_decisions (task_id, decision_id, status, outcome) VALUES ($1, $2, $3, $4)
		ON CONFLICT (task_id, decision_id) DO NOTHING`, taskID, decisionID, status, outcome)
	if err != nil {
		return false, fmt.Errorf("record decision %q of task %s: %w", decisionID, taskID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// DecisionStatus returns the recorded status of a decision, or "" when it
// has not run.
func DecisionStatus(ctx context.Context, db DBTX, taskID uuid.UUID, decisionID string) (string, error) {
	var status string
	err := db.QueryRow(ctx, `SELECT status FROM build_decisions WHERE task_id = $1 AND decision_id = $2`, taskID, decisionID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get decision %q of task %s: %w", decisionID, taskID, err)
	}
	return status, nil
}
