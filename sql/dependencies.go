package sql

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DependencyResult is what a succeeded dependency of a task left: its
// result's summary and the files it changed.
type DependencyResult struct {
	ID      uuid.UUID
	Type    TaskType
	Title   string // its planned task's title, if a plan made it
	Prompt  string // the first 300 characters
	Summary string
	Files   []ChangedFile
}

// ChangedFile is one entry of a result's filesChanged.
type ChangedFile struct {
	Path     string `json:"path"`
	Op       string `json:"op"`
	FromPath string `json:"fromPath,omitempty"`
}

// DependencyResults reads the succeeded dependencies of a task, in the
// order they were added.
func DependencyResults(ctx context.Context, db DBTX, taskID uuid.UUID) ([]DependencyResult, error) {
	rows, err := db.Query(ctx, `SELECT t.id, t.type, coalesce(t.input -> 'planned_task' ->> 'title', ''), left(coalesce(t.prompt, ''), 300),
			coalesce(t.result ->> 'summary', ''),
			CASE WHEN jsonb_typeof(t.result -> 'filesChanged') = 'array' THEN t.result -> 'filesChanged' ELSE '[]' END
		FROM task_dependencies d JOIN ai_tasks t ON t.id = d.depends_on_task_id
		WHERE d.task_id = $1 AND t.status = 'succeeded'
		ORDER BY d.created_at, t.id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("read the dependencies of task %s: %w", taskID, err)
	}
	deps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DependencyResult, error) {
		var d DependencyResult
		var files []byte
		if err := r.Scan(&d.ID, &d.Type, &d.Title, &d.Prompt, &d.Summary, &files); err != nil {
			return d, err
		}
		// A result written by hand may hold anything: what does not decode
		// is no files.
		_ = json.Unmarshal(files, &d.Files)
		return d, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the dependencies of task %s: %w", taskID, err)
	}
	return deps, nil
}
