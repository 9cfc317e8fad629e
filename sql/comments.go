package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Comment is one task_comments row: a remark on a task's change set,
// optionally on one file and line of its diff.
type Comment struct {
	ID        uuid.UUID `json:"id"`
	TaskID    uuid.UUID `json:"task_id"`
	ProjectID uuid.UUID `json:"project_id"`
	Author    string    `json:"author"`
	Body      string    `json:"body"`
	Path      string    `json:"path,omitempty"`
	Line      *int      `json:"line,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

const commentColumns = `id, task_id, project_id, author, body, coalesce(path, ''), line, created_at`

func scanComments(rows pgx.Rows) ([]Comment, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Comment, error) {
		var c Comment
		err := row.Scan(&c.ID, &c.TaskID, &c.ProjectID, &c.Author, &c.Body, &c.Path, &c.Line, &c.CreatedAt)
		return c, err
	})
}

// AddComment records a comment on a task of its project.
func AddComment(ctx context.Context, db DBTX, c Comment) (Comment, error) {
	rows, err := db.Query(ctx, `INSERT INTO task_comments (task_id, project_id, author, body, path, line)
		SELECT id, project_id, $2, $3, nullif($4, ''), $5 FROM ai_tasks WHERE id = $1
		RETURNING `+commentColumns, c.TaskID, c.Author, c.Body, c.Path, c.Line)
	if err != nil {
		return Comment{}, fmt.Errorf("add comment to task %s: %w", c.TaskID, err)
	}
	out, err := scanComments(rows)
	if err != nil {
		return Comment{}, fmt.Errorf("add comment to task %s: %w", c.TaskID, err)
	}
	if len(out) == 0 {
		return Comment{}, fmt.Errorf("add comment to task %s: %w", c.TaskID, ErrTaskNotFound)
	}
	return out[0], nil
}

// TaskComments returns a task's comments, oldest first.
func TaskComments(ctx context.Context, db DBTX, taskID uuid.UUID) ([]Comment, error) {
	return TaskCommentsSince(ctx, db, taskID, time.Time{})
}

// TaskCommentsSince returns the comments made on a task after since,
// oldest first.
func TaskCommentsSince(ctx context.Context, db DBTX, taskID uuid.UUID, since time.Time) ([]Comment, error) {
	rows, err := db.Query(ctx, `SELECT `+commentColumns+` FROM task_comments
		WHERE task_id = $1 AND created_at > $2 ORDER BY created_at, id`, taskID, since)
	if err != nil {
		return nil, fmt.Errorf("read comments of task %s: %w", taskID, err)
	}
	out, err := scanComments(rows)
	if err != nil {
		return nil, fmt.Errorf("read comments of task %s: %w", taskID, err)
	}
	return out, nil
}
