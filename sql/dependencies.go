package sql

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// DependencyResult is what a succeeded dependency of a task left: its
// result's summary and the files it changed.
type DependencyResult struct {
	ID      uuid.UUID     `json:"id"`
	Type    TaskType      `json:"type"`
	Title   string        `json:"title"`  // its planned task's title, if a plan made it
	Prompt  string        `json:"prompt"` // the first 300 characters
	Summary string        `json:"summary"`
	Files   []ChangedFile `json:"files"`
}

// ChangedFile is one entry of a result's filesChanged.
type ChangedFile struct {
	Path     string `json:"path"`
	Op       string `json:"op"`
	FromPath string `json:"fromPath,omitempty"`
}

// dependencyResults selects, as a jsonb array, the succeeded dependencies
// of the task $1 in the order they were added.
const dependencyResults = `SELECT coalesce(jsonb_agg(jsonb_build_object(
		'id', t.id, 'type', t.type, 'title', coalesce(t.input -> 'planned_task' ->> 'title', ''),
		'prompt', left(coalesce(t.prompt, ''), 300), 'summary', coalesce(t.result ->> 'summary', ''),
		'files', CASE WHEN jsonb_typeof(t.result -> 'filesChanged') = 'array' THEN t.result -> 'filesChanged' ELSE '[]' END)
		ORDER BY d.created_at, t.id), '[]')
	FROM task_dependencies d JOIN ai_tasks t ON t.id = d.depends_on_task_id
	WHERE d.task_id = $1 AND t.status = 'succeeded'`

// documentRows selects, as a jsonb array, the documents of the project $2
// by path.
const documentRows = `SELECT coalesce(jsonb_agg(jsonb_build_object(
		'project_id', project_id, 'path', path, 'title', title, 'doc_type', doc_type, 'mandatory', mandatory,
		'tags', tags, 'etag', etag, 'problem', coalesce(problem, ''), 'updated_at', updated_at) ORDER BY path), '[]')
	FROM documents WHERE project_id = $2`

// ReadTaskContext reads, in one statement, what a task's context needs of
// the database: its project's documents rows and its succeeded
// dependencies' results.
func ReadTaskContext(ctx context.Context, db DBTX, projectID, taskID uuid.UUID) ([]Document, []DependencyResult, error) {
	var docsJSON, depsJSON []byte
	if err := db.QueryRow(ctx, `SELECT (`+documentRows+`), (`+dependencyResults+`)`, taskID, projectID).
		Scan(&docsJSON, &depsJSON); err != nil {
		return nil, nil, fmt.Errorf("read the context of task %s: %w", taskID, err)
	}
	var docs []Document
	var deps []DependencyResult
	if err := json.Unmarshal(docsJSON, &docs); err != nil {
		return nil, nil, fmt.Errorf("read the documents of project %s: %w", projectID, err)
	}
	// A result written by hand may hold anything: decode it leniently.
	if err := json.Unmarshal(depsJSON, &deps); err != nil {
		deps = decodeDependencies(depsJSON)
	}
	return docs, deps, nil
}

// decodeDependencies decodes the dependencies one by one, a result whose
// files do not decode keeping none.
func decodeDependencies(raw []byte) []DependencyResult {
	var items []json.RawMessage
	_ = json.Unmarshal(raw, &items)
	out := make([]DependencyResult, 0, len(items))
	for _, it := range items {
		var d DependencyResult
		if json.Unmarshal(it, &d) != nil {
			var bare struct {
				ID      uuid.UUID `json:"id"`
				Type    TaskType  `json:"type"`
				Title   string    `json:"title"`
				Prompt  string    `json:"prompt"`
				Summary string    `json:"summary"`
			}
			_ = json.Unmarshal(it, &bare)
			d = DependencyResult{ID: bare.ID, Type: bare.Type, Title: bare.Title, Prompt: bare.Prompt, Summary: bare.Summary}
		}
		out = append(out, d)
	}
	return out
}
