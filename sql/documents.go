package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Document is one documents row: a Markdown document of a project's files
// as its storage listing last showed it and its front matter says.
type Document struct {
	ProjectID uuid.UUID `json:"project_id"`
	Path      string    `json:"path"`
	Title     string    `json:"title"`
	DocType   string    `json:"doc_type"`
	Mandatory bool      `json:"mandatory"`
	Tags      []string  `json:"tags"`
	ETag      string    `json:"etag"`
	// Problem says why the front matter was ignored, if it was.
	Problem   string    `json:"problem,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

const documentColumns = `project_id, path, title, doc_type, mandatory, tags, etag, coalesce(problem, ''), updated_at`

// SyncDocuments writes what was read of a project's documents (upserted by
// path) and removes the rows of every document not in keep, in one
// transaction (db begins it: a pool, a connection or a transaction). It
// returns the rows removed.
func SyncDocuments(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, projectID uuid.UUID, read []Document, keep []string) (int64, error) {
	var removed int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, d := range read {
			tags := d.Tags
			if tags == nil {
				tags = []string{}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO documents (project_id, path, title, doc_type, mandatory, tags, etag, problem)
				VALUES ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''))
				ON CONFLICT (project_id, path) DO UPDATE SET title = EXCLUDED.title, doc_type = EXCLUDED.doc_type,
					mandatory = EXCLUDED.mandatory, tags = EXCLUDED.tags, etag = EXCLUDED.etag, problem = EXCLUDED.problem,
					updated_at = now()`,
				projectID, d.Path, d.Title, d.DocType, d.Mandatory, tags, d.ETag, d.Problem); err != nil {
				return fmt.Errorf("write document %s: %w", d.Path, err)
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM documents WHERE project_id = $1 AND NOT (path = ANY ($2::text[]))`, projectID, keep)
		if err != nil {
			return fmt.Errorf("remove the documents gone: %w", err)
		}
		removed = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sync the documents of project %s: %w", projectID, err)
	}
	return removed, nil
}

// ListDocuments reads a project's documents by path, those after the path
// after ("" from the first), at most limit (0: all).
func ListDocuments(ctx context.Context, db DBTX, projectID uuid.UUID, after string, limit int) ([]Document, error) {
	rows, err := db.Query(ctx, `SELECT `+documentColumns+` FROM documents
		WHERE project_id = $1 AND path > $2 ORDER BY path LIMIT nullif($3, 0)`, projectID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list the documents of project %s: %w", projectID, err)
	}
	docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Document, error) {
		var d Document
		err := r.Scan(&d.ProjectID, &d.Path, &d.Title, &d.DocType, &d.Mandatory, &d.Tags, &d.ETag, &d.Problem, &d.UpdatedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the documents of project %s: %w", projectID, err)
	}
	return docs, nil
}
