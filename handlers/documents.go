package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentworker/agentworker/handlers/docindex"
	"github.com/agentworker/agentworker/handlers/projectctx"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// inlineDoc is a mandatory document whose text the prompt holds.
type inlineDoc struct {
	doc  agentsql.Document
	text string
}

// projectDocs are the project's documents as the task's context gives
// them: the mandatory ones inlined, the others listed by path and title.
// The rules files are indexed as documents too, but reach the model as
// rules (projectRules), not here.
type projectDocs struct {
	inline []inlineDoc
	listed []agentsql.Document
}

// loadDocuments brings the project's documents index (rows, as read with
// the task's context) up to its files, and reads the mandatory documents'
// text through files (a build's change set, so a resumed build sees its
// own version). found are the documents of the listing the context was
// built from, when listed says that listing shows the project as stored;
// else the store is listed again. Documents help, they are not the task:
// whatever fails here is logged and the task goes on with what could be
// read. At most the context budget of mandatory text is read: more could
// not be inlined whatever else the context holds, so the rest is listed.
func (r *Runner) loadDocuments(ctx context.Context, files storage.Store, task agentsql.Task, found []storage.FileInfo, listed bool,
	rows []agentsql.Document, log *slog.Logger) projectDocs {
	names := projectctx.RuleNames(r.cfg.RuleFallbacks)
	if !listed {
		listing, err := r.deps.Store.List(ctx, task.ProjectID.String(), "")
		if err != nil {
			if ctx.Err() == nil {
				log.WarnContext(ctx, "documents index not refreshed; the task is given the documents as last indexed", slog.String("err", err.Error()))
			}
			found = nil
		} else {
			found, listed = projectctx.FindDocuments(listing, names), true
		}
	}
	if listed {
		now, _, err := docindex.Sync(ctx, r.deps.Pool, r.deps.Store, task.ProjectID, found, rows, names, log)
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "documents index not refreshed; the task is given the documents as last indexed", slog.String("err", err.Error()))
		}
		rows = now
	}
	var docs projectDocs
	inlined := 0
	for _, d := range rows {
		if projectctx.IsRulesFile(d.Path, names) {
			continue
		}
		if d.Mandatory && inlined <= r.cfg.ContextBudget {
			if text, ok := readDocumentText(ctx, files, task, d, log); ok {
				docs.inline = append(docs.inline, inlineDoc{doc: d, text: text})
				inlined += len(text)
				continue
			}
		}
		docs.listed = append(docs.listed, d)
	}
	return docs
}

// readDocumentText is a document's text without its front matter; false
// (logged) when it cannot be given whole, so it is listed instead.
func readDocumentText(ctx context.Context, files storage.Store, task agentsql.Task, d agentsql.Document, log *slog.Logger) (string, bool) {
	content, info, err := files.Read(ctx, task.ProjectID.String(), d.Path)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return "", false
	case err != nil:
		log.WarnContext(ctx, "mandatory document not read; it is listed instead", slog.String("path", d.Path), slog.String("err", err.Error()))
		return "", false
	case info.Size > docindex.MaxDocumentBytes || len(content) > docindex.MaxDocumentBytes:
		log.WarnContext(ctx, "mandatory document too large to inline; it is listed instead", slog.String("path", d.Path), slog.Int("bytes", len(content)))
		return "", false
	}
	return strings.TrimSpace(string(projectctx.ParseDocument(d.Path, content, nil).Body)), true
}

// listedDocument is one line of the documents' list.
func listedDocument(d agentsql.Document) string {
	var extra []string
	if d.Mandatory {
		extra = append(extra, "mandatory, not inlined")
	}
	if d.DocType != "" {
		extra = append(extra, d.DocType)
	}
	if len(d.Tags) > 0 {
		extra = append(extra, "tags: "+strings.Join(d.Tags, ", "))
	}
	line := fmt.Sprintf("- %s: %s", d.Path, d.Title)
	if len(extra) > 0 {
		line += " (" + strings.Join(extra, "; ") + ")"
	}
	return line + "\n"
}

// reindexAfterApply refreshes the project's documents index once a change
// set that touched a document landed, so the next task's context and GET
// /v1/projects/{id}/docs show it without waiting. A failure is logged:
// the next task's context refreshes the index anyway.
func (r *taskRun) reindexAfterApply(ctx context.Context, entries []agentsql.ChangeEntry) {
	names := projectctx.RuleNames(r.runner.cfg.RuleFallbacks)
	touched := false
	for _, e := range entries {
		touched = touched || projectctx.IsDocument(e.Path, names) || e.FromPath != "" && projectctx.IsDocument(e.FromPath, names)
	}
	if !touched {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	st, err := docindex.Refresh(ctx, r.runner.deps.Pool, r.runner.deps.Store, r.task.ProjectID, names, r.log)
	if err != nil {
		r.log.WarnContext(ctx, "documents index not refreshed after the build changed documents", slog.String("err", err.Error()))
		return
	}
	r.log.DebugContext(ctx, "documents index refreshed after apply", slog.Int("read", st.Read), slog.Int("removed", st.Removed))
}
