package sql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrInboxItemNotFound reports that no open inbox item has the given id.
var ErrInboxItemNotFound = errors.New("open inbox item not found")

// Inbox item kinds.
const (
	InboxAwaitUserInput = "await_user_input"
	InboxTaskCompleted  = "task_completed"
)

// InboxItem is one inbox_items row: what waits for a person.
type InboxItem struct {
	ID         uuid.UUID
	ProjectID  uuid.UUID
	TaskID     *uuid.UUID
	RunID      *uuid.UUID
	Kind       string
	Reason     string
	Title      string
	Content    string
	Status     string
	Answer     *string
	Resolver   *string
	Version    int
	CreatedAt  time.Time
	ResolvedAt *time.Time
}

const inboxColumns = `id, project_id, task_id, run_id, kind, reason, title, content, status, answer, resolver,
	version, created_at, resolved_at`

func scanInbox(row pgx.Row) (InboxItem, error) {
	var i InboxItem
	err := row.Scan(&i.ID, &i.ProjectID, &i.TaskID, &i.RunID, &i.Kind, &i.Reason, &i.Title, &i.Content, &i.Status,
		&i.Answer, &i.Resolver, &i.Version, &i.CreatedAt, &i.ResolvedAt)
	return i, err
}

// OpenInboxItem creates an open item. An item for a run is unique per run,
// kind and reason while open: opened bool is false when one already exists
// (stuck detection and budgets never pile up duplicates).
func OpenInboxItem(ctx context.Context, db DBTX, it InboxItem) (item InboxItem, opened bool, err error) {
	if it.Reason == "" {
		it.Reason = "question"
	}
	item, err = scanInbox(db.QueryRow(ctx, `INSERT INTO inbox_items (project_id, task_id, run_id, kind, reason, title, content)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (run_id, kind, reason) WHERE status = 'open' AND run_id IS NOT NULL DO NOTHING
		RETURNING `+inboxColumns, it.ProjectID, it.TaskID, it.RunID, it.Kind, it.Reason, it.Title, it.Content))
	if errors.Is(err, pgx.ErrNoRows) {
		return InboxItem{}, false, nil
	}
	if err != nil {
		return InboxItem{}, false, fmt.Errorf("open %s inbox item for project %s: %w", it.Kind, it.ProjectID, err)
	}
	return item, true, nil
}

// ListInbox returns a project's items, newest first; open only when openOnly.
func ListInbox(ctx context.Context, db DBTX, projectID uuid.UUID, openOnly bool, limit int) ([]InboxItem, error) {
	rows, err := db.Query(ctx, `SELECT `+inboxColumns+` FROM inbox_items
		WHERE project_id = $1 AND (NOT $2 OR status = 'open') ORDER BY created_at DESC LIMIT $3`, projectID, openOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("list inbox of project %s: %w", projectID, err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (InboxItem, error) { return scanInbox(row) })
	if err != nil {
		return nil, fmt.Errorf("list inbox of project %s: %w", projectID, err)
	}
	return items, nil
}

// CloseInboxItem closes an open item that needs no answer (task_completed,
// a stuck alert someone looked at). A question the agent asked is closed by
// answering it: agentworker_answer_input, which also resumes the task.
func CloseInboxItem(ctx context.Context, db DBTX, id uuid.UUID, resolver string) (InboxItem, error) {
	item, err := scanInbox(db.QueryRow(ctx, `UPDATE inbox_items SET status = 'closed', resolver = $2,
		resolved_at = now(), version = version + 1
		WHERE id = $1 AND status = 'open' AND NOT (kind = 'await_user_input' AND reason = 'question')
		RETURNING `+inboxColumns, id, resolver))
	if errors.Is(err, pgx.ErrNoRows) {
		return InboxItem{}, fmt.Errorf("close inbox item %s: %w", id, ErrInboxItemNotFound)
	}
	if err != nil {
		return InboxItem{}, fmt.Errorf("close inbox item %s: %w", id, err)
	}
	return item, nil
}

// FlagIdle raises a stuck_idle alert for every running task whose timeline
// has not moved for idle (agentworker_flag_idle) and returns the tasks newly
// flagged; a run is flagged once while its item stays open.
func FlagIdle(ctx context.Context, db DBTX, idle time.Duration) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT task_id FROM agentworker_flag_idle($1)`, idle)
	if err != nil {
		return nil, fmt.Errorf("flag idle tasks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("flag idle tasks: %w", err)
	}
	return ids, nil
}

// GetInboxItem reads one item.
func GetInboxItem(ctx context.Context, db DBTX, id uuid.UUID) (InboxItem, error) {
	item, err := scanInbox(db.QueryRow(ctx, `SELECT `+inboxColumns+` FROM inbox_items WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return InboxItem{}, fmt.Errorf("get inbox item %s: %w", id, ErrInboxItemNotFound)
	}
	if err != nil {
		return InboxItem{}, fmt.Errorf("get inbox item %s: %w", id, err)
	}
	return item, nil
}

// LastAnswer returns the answer to the task's latest question
// (agentworker_answer_input); ok is false when none was answered.
func LastAnswer(ctx context.Context, db DBTX, taskID uuid.UUID) (answer string, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT answer FROM inbox_items
		WHERE task_id = $1 AND kind = 'await_user_input' AND reason = 'question' AND status = 'closed' AND answer IS NOT NULL
		ORDER BY resolved_at DESC LIMIT 1`, taskID).Scan(&answer)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the answer for task %s: %w", taskID, err)
	}
	return answer, true, nil
}
