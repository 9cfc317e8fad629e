package api

import (
	"net/http"

	"github.com/agentworker/agentworker/handlers/docindex"
	"github.com/agentworker/agentworker/handlers/projectctx"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Documents is the answer of GET /v1/projects/{id}/docs: a page of the
// project's documents by path, and the cursor of the next page (the last
// path), empty on the last.
type Documents struct {
	Documents []agentsql.Document `json:"documents"`
	Next      string              `json:"next,omitempty"`
}

const (
	defaultDocsLimit = 100
	maxDocsLimit     = 500
	// maxDocsCursor bounds ?after=, a document path.
	maxDocsCursor = 1024
)

// listDocuments serves GET /v1/projects/{id}/docs?after=&limit=.
func (a *API) listDocuments(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", defaultDocsLimit, maxDocsLimit)
	if err != nil {
		return err
	}
	after := r.URL.Query().Get("after")
	if len(after) > maxDocsCursor {
		return validation("after is at most %d bytes", maxDocsCursor)
	}
	// One more than the page says whether another follows.
	docs, err := agentsql.ListDocuments(r.Context(), a.pool, accessOf(r).id, after, limit+1)
	if err != nil {
		return err
	}
	out := Documents{Documents: docs}
	if len(docs) > limit {
		out.Documents = docs[:limit]
		out.Next = docs[limit-1].Path
	}
	if out.Documents == nil {
		out.Documents = []agentsql.Document{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// indexDocuments serves POST /v1/projects/{id}/docs/index: the project's
// documents index refreshed from its files now, as a task's context does.
func (a *API) indexDocuments(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Store == nil {
		return errNoStore
	}
	st, err := docindex.Refresh(r.Context(), a.pool, a.cfg.Store, accessOf(r).id, projectctx.RuleNames(a.cfg.RuleFallbacks), a.cfg.Logger)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
