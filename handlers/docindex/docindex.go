// Package docindex keeps a project's documents table current with its
// files: the Markdown under docs/ and the rules files, each with what its
// front matter says (title, type, mandatory, tags). A refresh lists the
// project, re-reads only the documents whose etag changed since their row
// was written, and removes the rows of documents that are gone. Documents
// are the project's text, hostile input: a bad one is indexed with its
// problem and logged, never a reason to fail.
package docindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/handlers/projectctx"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// MaxDocuments is the most documents of one project indexed, the first by
// path; the rest are left out (and logged).
const MaxDocuments = 1000

// MaxDocumentBytes is the largest document read; a larger one is indexed
// by its name with a problem, its front matter unread.
const MaxDocumentBytes = storage.DefaultMaxReadBytes

// Stats is what a refresh did.
type Stats struct {
	Documents int `json:"documents"` // documents indexed now
	Read      int `json:"read"`      // re-read: new, or changed since their row
	Removed   int `json:"removed"`   // rows removed: their files are gone
	// Skipped are the documents past MaxDocuments, left out.
	Skipped int `json:"skipped"`
}

// DB is what a refresh needs of the database: queries, and a transaction
// for the write.
type DB interface {
	agentsql.DBTX
	Begin(context.Context) (pgx.Tx, error)
}

// Refresh brings a project's documents rows up to its files in store, as
// one listing shows them. names are the rules file names
// (projectctx.RuleNames).
func Refresh(ctx context.Context, db DB, store storage.Store, projectID uuid.UUID, names []string, log *slog.Logger) (Stats, error) {
	listing, err := store.List(ctx, projectID.String(), "")
	if err != nil {
		return Stats{}, fmt.Errorf("refresh the documents of project %s: list: %w", projectID, err)
	}
	rows, err := agentsql.ListDocuments(ctx, db, projectID, "", 0)
	if err != nil {
		return Stats{}, err
	}
	_, st, err := Sync(ctx, db, store, projectID, projectctx.FindDocuments(listing, names), rows, names, log)
	return st, err
}

// Sync brings rows, a project's documents rows as read, up to docs, its
// documents as a listing of store shows them (projectctx.FindDocuments):
// a document new or at another etag than its row's is read from store,
// and a row whose document is gone is removed. It writes only when
// something changed, and returns the rows as they are now, by path.
func Sync(ctx context.Context, db DB, store storage.Store, projectID uuid.UUID, docs []storage.FileInfo, rows []agentsql.Document,
	names []string, log *slog.Logger) ([]agentsql.Document, Stats, error) {
	var st Stats
	if len(docs) > MaxDocuments {
		st.Skipped = len(docs) - MaxDocuments
		log.WarnContext(ctx, "project has more documents than are indexed; the rest are left out",
			slog.String("project_id", projectID.String()), slog.Int("documents", len(docs)), slog.Int("indexed", MaxDocuments))
		docs = docs[:MaxDocuments]
	}
	known := make(map[string]agentsql.Document, len(rows))
	for _, d := range rows {
		known[d.Path] = d
	}
	var read, now []agentsql.Document
	keep := make([]string, 0, len(docs))
	for _, f := range docs {
		if d, ok := known[f.Path]; ok && d.ETag == f.ETag {
			keep, now = append(keep, f.Path), append(now, d)
			continue
		}
		d, ok, err := readDocument(ctx, store, projectID, f, names)
		if err != nil {
			return rows, st, err
		}
		if !ok {
			continue // gone since the listing
		}
		if d.Problem != "" {
			log.WarnContext(ctx, "document front matter ignored", slog.String("project_id", projectID.String()),
				slog.String("path", d.Path), slog.String("reason", d.Problem))
		}
		keep, now, read = append(keep, f.Path), append(now, d), append(read, d)
	}
	kept := make(map[string]bool, len(keep))
	for _, p := range keep {
		kept[p] = true
	}
	gone := 0
	for _, d := range rows {
		if !kept[d.Path] {
			gone++
		}
	}
	st.Documents, st.Read = len(keep), len(read)
	if len(read) == 0 && gone == 0 {
		return now, st, nil
	}
	removed, err := agentsql.SyncDocuments(ctx, db, projectID, read, keep)
	if err != nil {
		return rows, st, err
	}
	st.Removed = int(removed)
	return now, st, nil
}

// readDocument reads one document's row; false when it is gone.
func readDocument(ctx context.Context, store storage.Store, projectID uuid.UUID, f storage.FileInfo, names []string) (agentsql.Document, bool, error) {
	d := agentsql.Document{ProjectID: projectID, Path: f.Path, ETag: f.ETag}
	var meta projectctx.DocMeta
	if f.Size > MaxDocumentBytes {
		meta = projectctx.ParseDocument(f.Path, nil, names)
		meta.Problem = fmt.Sprintf("document of %d bytes is larger than %d: not read", f.Size, MaxDocumentBytes)
	} else {
		content, info, err := store.Read(ctx, projectID.String(), f.Path)
		if errors.Is(err, storage.ErrNotFound) {
			return d, false, nil
		}
		if err != nil {
			return d, false, fmt.Errorf("read document %s of project %s: %w", f.Path, projectID, err)
		}
		// The row is of the version read, which may be newer than the listing's.
		if info.ETag != "" {
			d.ETag = info.ETag
		}
		meta = projectctx.ParseDocument(f.Path, content, names)
	}
	d.Title, d.DocType, d.Mandatory, d.Tags, d.Problem = meta.Title, meta.Type, meta.Mandatory, meta.Tags, meta.Problem
	return d, true, nil
}
