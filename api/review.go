package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

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
		if err := a.checkCommentLine(r, acc.id, req.Path, req.Line); err != nil {
			return err
		}
	}
	c, err := agentsql.AddComment(r.Context(), a.pool, agentsql.Comment{TaskID: acc.id, Author: actor(acc.claims),
		Body: req.Body, Path: req.Path, Line: req.Line})
	if err != nil {
		return notVisible(acc.claims, err)
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

// checkCommentLine refuses a comment on a file the task's change set does
// not change, or on a line its staged version (the revision under review)
// does not have: the reviewer and the model must see the same line.
func (a *API) checkCommentLine(r *http.Request, taskID uuid.UUID, path string, line *int) error {
	_, entries, err := agentsql.BuildChanges(r.Context(), a.pool, taskID)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Path != path {
			continue
		}
		switch {
		case line == nil:
			return nil
		case e.Op == agentsql.ChangeDelete:
			return validation("%s is deleted by this revision: comment on the file, not on line %d", path, *line)
		case binary(e.Content):
			return validation("%s is a binary file: comment on the file, not on line %d", path, *line)
		}
		if n := lineCount(e.Content); *line > n {
			return validation("line %d is not in the revision under review: %s has %d line%s", *line, path, n, plural(n))
		}
		return nil
	}
	return validation("%s is not changed by this task's revision: comment on a file of its diff", path)
}

// lineCount is the number of lines of content, the last one counted
// whether or not it ends with a newline.
func lineCount(content []byte) int {
	n := bytes.Count(content, []byte("\n"))
	if len(content) > 0 && content[len(content)-1] != '\n' {
		n++
	}
	return n
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
