package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
)

// CodeChangeConflict: an approve whose change set was made against files
// changed in storage since; nothing was applied.
const CodeChangeConflict = "CHANGE_CONFLICT"

// maxCommentBody bounds a comment's request body.
const maxCommentBody = 64 << 10

// readSmallJSON decodes an optional JSON body of at most limit bytes.
func readSmallJSON(r *http.Request, limit int, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	switch {
	case err != nil:
		return validation("could not read the request body")
	case len(body) > limit:
		return errTooLarge
	case len(body) > 0:
		if err := json.Unmarshal(body, v); err != nil {
			return validation("request body is not valid JSON: %v", err)
		}
	}
	return nil
}

// checkApprovable refuses the approve of a task in review whose staged
// files were changed in storage since the build read them: the worker's
// apply would find the same conflict, so the person hears it now, and
// the task stays in review. The rule is the apply's own; the worker's
// fenced apply checks again.
func (a *API) checkApprovable(r *http.Request, t agentsql.Task) error {
	if a.cfg.Store == nil || t.Status != agentsql.StatusReview {
		return nil
	}
	status, _, err := agentsql.ChangeSetState(r.Context(), a.pool, t.ID)
	if err != nil || status != agentsql.ChangeSetOpen {
		return err
	}
	entries, err := agentsql.ListChangeEntries(r.Context(), a.pool, t.ID)
	if err != nil {
		return err
	}
	changed, err := changeset.Conflicts(r.Context(), a.cfg.Store, t.ProjectID.String(), entries)
	if err != nil {
		return fmt.Errorf("check the change set of task %s before approving: %w", t.ID, err)
	}
	if len(changed) > 0 {
		return &apiError{http.StatusConflict, CodeChangeConflict,
			fmt.Sprintf("changed in storage since the build read them: %s; nothing was applied, the task stays in review", strings.Join(changed, ", "))}
	}
	return nil
}

type commentRequest struct {
	Body string `json:"body"`
	Path string `json:"path"`
	Line *int   `json:"line"`
}

// listComments serves GET /v1/tasks/{id}/comments.
func (a *API) listComments(w http.ResponseWriter, r *http.Request) error {
	comments, err := agentsql.TaskComments(r.Context(), a.pool, accessOf(r).id)
	if err != nil {
		return err
	}
	if comments == nil {
		comments = []agentsql.Comment{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"comments": comments})
	return nil
}

// addComment serves POST /v1/tasks/{id}/comments {"body", "path", "line"}.
func (a *API) addComment(w http.ResponseWriter, r *http.Request) error {
	acc := accessOf(r)
	var req commentRequest
	if err := readSmallJSON(r, maxCommentBody, &req); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(req.Body) == "":
		return validation("body is required")
	case req.Line != nil && *req.Line < 1:
		return validation("line counts from 1")
	case req.Line != nil && req.Path == "":
		return validation("a line needs its path")
	}
	if req.Path != "" {
		p, err := storage.CleanPath(req.Path)
		if err != nil {
			return validation("path: %v", err)
		}
		req.Path = p
	}
	c, err := agentsql.AddComment(r.Context(), a.pool, agentsql.Comment{TaskID: acc.id, Author: actor(acc.claims),
		Body: req.Body, Path: req.Path, Line: req.Line})
	if err != nil {
		return notVisible(acc.claims, err)
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}
