package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Change set statuses (change_sets.status).
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
	// Prior is what the path held before the apply (recorded when the set
	// is marked applying).
	Prior Prior
}

// Void reports an entry that changes nothing: the delete of a file the
// base did not hold (the build created it, then deleted or moved it). It is
// kept rather than dropped so that a rewind to a checkpoint that saw the
// file can put it back; applying it writes nothing.
func (e ChangeEntry) Void() bool { return e.Op == ChangeDelete && e.BaseETag == "" }

// OpenChangeSet creates the change set of the build task held by f, or
// returns the status of the one that exists (a retried attempt). created
// says this call made it: a new set has no entries and no decisions yet.
func OpenChangeSet(ctx context.Context, db DBTX, f Fence, projectID uuid.UUID) (status string, created bool, err error) {
	var st *string
	err = db.QueryRow(ctx, `WITH `+fenceCTE+`, ins AS (
			INSERT INTO change_sets (task_id, project_id) SELECT $1, $3 FROM fence
			ON CONFLICT (task_id) DO NOTHING RETURNING status)
		SELECT (SELECT status FROM ins UNION ALL SELECT status FROM change_sets WHERE task_id = $1 LIMIT 1),
			EXISTS (SELECT 1 FROM ins)
		FROM fence`, f.TaskID, f.Epoch, projectID).Scan(&st, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, fmt.Errorf("open change set of task %s: %w", f.TaskID, ErrFenced)
	}
	if err != nil {
		return "", false, fmt.Errorf("open change set of task %s: %w", f.TaskID, err)
	}
	if st == nil {
		return "", false, fmt.Errorf("open change set of task %s: not created", f.TaskID)
	}
	return *st, created, nil
}

// ResetChangeSet empties the change set (and the recorded decisions) of
// the task held by f and reopens it, for a build that starts over.
func ResetChangeSet(ctx context.Context, db DBTX, f Fence) error {
	// One statement: every build starts with it, most with nothing to reset.
	if _, err := fenced(ctx, db, f, `entries AS (DELETE FROM change_set_entries WHERE task_id = $1 AND EXISTS (SELECT 1 FROM fence)),
			decisions AS (DELETE FROM build_decisions WHERE task_id = $1 AND EXISTS (SELECT 1 FROM fence)),
			w AS (UPDATE change_sets SET status = 'open', result = NULL, updated_at = now()
				WHERE task_id = $1 AND EXISTS (SELECT 1 FROM fence) RETURNING 1)`); err != nil {
		return fmt.Errorf("reset change set and decisions of task %s: %w", f.TaskID, err)
	}
	return nil
}

// RewindChangeSet puts the change set of the task held by f back to what
// its last checkpoint recorded, for an attempt that resumes the
// conversation from that checkpoint: entries made after it are dropped,
// entries changed after it get their recorded state again.
func RewindChangeSet(ctx context.Context, db DBTX, f Fence) error {
	if _, err := fenced(ctx, db, f, `gone AS (DELETE FROM change_set_entries WHERE task_id = $1 AND NOT cp AND EXISTS (SELECT 1 FROM fence)),
		w AS (UPDATE change_set_entries SET op = cp_op, content = cp_content, from_path = cp_from_path, applied = false, updated_at = now()
			WHERE task_id = $1 AND cp AND (op IS DISTINCT FROM cp_op OR from_path IS DISTINCT FROM cp_from_path OR content IS DISTINCT FROM cp_content)
			AND EXISTS (SELECT 1 FROM fence) RETURNING 1)`); err != nil {
		return fmt.Errorf("rewind the change set of task %s to its checkpoint: %w", f.TaskID, err)
	}
	return nil
}

const entryColumns = `path, op, content, coalesce(from_path, ''), base_etag, ord, applied,
	prior_exists IS NOT NULL, coalesce(prior_exists, false), prior`

func scanEntry(row pgx.Row) (ChangeEntry, error) {
	var e ChangeEntry
	err := row.Scan(&e.Path, &e.Op, &e.Content, &e.FromPath, &e.BaseETag, &e.Ord, &e.Applied, &e.Prior.Known, &e.Prior.Exists, &e.Prior.Content)
	e.Prior.Path = e.Path
	return e, err
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

// PutChangeEntry stages the new state of a path in the change set of the
// task held by f. An existing entry keeps its base version and order: the
// change is still against what the path was when the build first touched it.
func PutChangeEntry(ctx context.Context, db DBTX, f Fence, e ChangeEntry) error {
	var content any
	if e.Op == ChangeWrite {
		content = e.Content
		if content == nil {
			content = []byte{}
		}
	}
	_, err := fenced(ctx, db, f, `w AS (INSERT INTO change_set_entries (task_id, path, op, content, from_path, base_etag, ord)
		SELECT $1, $3, $4, $5, nullif($6, ''), $7,
			(SELECT coalesce(max(ord), 0) + 1 FROM change_set_entries WHERE task_id = $1)
		FROM fence
		ON CONFLICT (task_id, path) DO UPDATE SET op = excluded.op, content = excluded.content,
			from_path = excluded.from_path, applied = false, updated_at = now()
		RETURNING 1)`,
		e.Path, e.Op, content, e.FromPath, e.BaseETag)
	if err != nil {
		return fmt.Errorf("stage %s of %q in task %s: %w", e.Op, e.Path, f.TaskID, err)
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

// Prior is what a path held before its change set was applied.
type Prior struct {
	Path    string
	Known   bool // recorded (a set marked applying before priors were kept has none)
	Exists  bool
	Content []byte
}

// MarkChangeSetApplying commits the decision to apply the change set of
// the task held by f, with the result the task will have once it is
// applied and what each path held before, to put back should the apply
// stop at a conflict. From here on the set is finished (or rolled back),
// never left half applied, even after a crash.
func MarkChangeSetApplying(ctx context.Context, db DBTX, f Fence, result json.RawMessage, priors []Prior) error {
	paths := make([]string, len(priors))
	exists := make([]bool, len(priors))
	contents := make([][]byte, len(priors))
	for i, p := range priors {
		paths[i], exists[i], contents[i] = p.Path, p.Exists, p.Content
	}
	// Each entry finds its prior by position, not by joining the arrays:
	// the planner sizes a parameter array at 100 rows but an argument at its
	// length, so a join made every call plan the statement again.
	n, err := fenced(ctx, db, f, `p AS (
			UPDATE change_set_entries e SET prior = ($6::bytea[])[array_position($4::text[], e.path)],
				prior_exists = ($5::bool[])[array_position($4::text[], e.path)]
			WHERE e.task_id = $1 AND array_position($4::text[], e.path) IS NOT NULL AND EXISTS (SELECT 1 FROM fence)),
		w AS (UPDATE change_sets SET status = 'applying', result = $3, updated_at = now()
			WHERE task_id = $1 AND status IN ('open', 'applying') AND EXISTS (SELECT 1 FROM fence)
			RETURNING 1)`, JSONB(result), paths, exists, contents)
	if err != nil {
		return fmt.Errorf("mark change set of task %s applying: %w", f.TaskID, err)
	}
	if n != 1 {
		return fmt.Errorf("mark change set of task %s applying: no open change set", f.TaskID)
	}
	return nil
}

// MarkChangeEntryApplied records that one entry reached storage. Its fence
// check is also the go-ahead for the next write of the apply.
func MarkChangeEntryApplied(ctx context.Context, db DBTX, f Fence, path string) error {
	if _, err := fenced(ctx, db, f, `w AS (UPDATE change_set_entries SET applied = true, updated_at = now()
		WHERE task_id = $1 AND path = $3 AND EXISTS (SELECT 1 FROM fence) RETURNING 1)`, path); err != nil {
		return fmt.Errorf("mark change of %q in task %s applied: %w", path, f.TaskID, err)
	}
	return nil
}

// FinishChangeSet moves the change set of the task held by f to applied or
// discarded. A discarded set drops its entries (their content is no longer
// needed); a set already applying is left alone unless rolledBack says its
// apply was undone.
func FinishChangeSet(ctx context.Context, db DBTX, f Fence, status string, rolledBack bool) error {
	ctes, args, err := finishChangeSetStatement(f, status, rolledBack)
	if err != nil {
		return err
	}
	if _, err := fenced(ctx, db, f, ctes, args...); err != nil {
		return fmt.Errorf("finish change set of task %s as %s: %w", f.TaskID, status, err)
	}
	return nil
}

// QueueFinishChangeSet queues FinishChangeSet's statement in p.
func QueueFinishChangeSet(p *Pipeline, f Fence, status string, rolledBack bool) error {
	ctes, args, err := finishChangeSetStatement(f, status, rolledBack)
	if err != nil {
		return err
	}
	queueFenced(p, f, ctes, func(_ int64, err error) error {
		if err != nil {
			return fmt.Errorf("finish change set of task %s as %s: %w", f.TaskID, status, err)
		}
		return nil
	}, args...)
	return nil
}

func finishChangeSetStatement(f Fence, status string, rolledBack bool) (string, []any, error) {
	if status != ChangeSetApplied && status != ChangeSetDiscarded {
		return "", nil, fmt.Errorf("finish change set of task %s: status %q is not final", f.TaskID, status)
	}
	// One text a status, without a parameter deciding between them: Postgres
	// planned the shared text again on every call (a custom plan, which
	// folds the status, always looked cheaper than the generic one).
	if status == ChangeSetApplied {
		return `w AS (
			UPDATE change_sets SET status = 'applied', updated_at = now()
			WHERE task_id = $1 AND EXISTS (SELECT 1 FROM fence) RETURNING status)`, nil, nil
	}
	// A set being applied is never discarded: it is finished by Resume,
	// or rolled back after a conflict.
	return `w AS (
			UPDATE change_sets SET status = 'discarded', updated_at = now()
			WHERE task_id = $1 AND (status = 'open' OR (status = 'applying' AND $3))
			AND EXISTS (SELECT 1 FROM fence) RETURNING status),
		d AS (
			DELETE FROM change_set_entries WHERE task_id = $1 AND EXISTS (SELECT 1 FROM w))`,
		[]any{rolledBack}, nil
}

// Decision outcomes of a plan-driven build step.
const (
	DecisionAccepted = "accepted"
	DecisionRejected = "rejected"
)

// RecordDecision records the outcome of a build step by its decision id,
// for the task held by f. recorded is false when the decision was already
// recorded: it ran before.
func RecordDecision(ctx context.Context, db DBTX, f Fence, decisionID, status string, outcome json.RawMessage) (recorded bool, err error) {
	if len(outcome) == 0 {
		outcome = json.RawMessage(`{}`)
	}
	n, err := fenced(ctx, db, f, `w AS (INSERT INTO build_decisions (task_id, decision_id, status, outcome)
		SELECT $1, $3, $4, $5 FROM fence
		ON CONFLICT (task_id, decision_id) DO NOTHING RETURNING 1)`, decisionID, status, outcome)
	if err != nil {
		return false, fmt.Errorf("record decision %q of task %s: %w", decisionID, f.TaskID, err)
	}
	return n == 1, nil
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

// DropChangeEntries removes the staged changes of paths from the change
// set of the task held by f, checkpointed or not: the build sees those
// files as storage holds them again.
func DropChangeEntries(ctx context.Context, db DBTX, f Fence, paths []string) error {
	if _, err := fenced(ctx, db, f, `w AS (DELETE FROM change_set_entries
		WHERE task_id = $1 AND path = ANY($3::text[]) AND EXISTS (SELECT 1 FROM fence) RETURNING 1)`, paths); err != nil {
		return fmt.Errorf("drop the staged changes of %v in task %s: %w", paths, f.TaskID, err)
	}
	return nil
}
