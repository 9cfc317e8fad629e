package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// inboxItem is an inbox item as the API shows it.
type inboxItem struct {
	ID         uuid.UUID  `json:"id"`
	ProjectID  uuid.UUID  `json:"project_id"`
	TaskID     *uuid.UUID `json:"task_id,omitempty"`
	RunID      *uuid.UUID `json:"run_id,omitempty"`
	Kind       string     `json:"kind"`
	Reason     string     `json:"reason"`
	Title      string     `json:"title"`
	Content    string     `json:"content"`
	Status     string     `json:"status"`
	Answer     *string    `json:"answer,omitempty"`
	Resolver   *string    `json:"resolver,omitempty"`
	Version    int        `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

func toItem(i agentsql.InboxItem) inboxItem {
	return inboxItem{ID: i.ID, ProjectID: i.ProjectID, TaskID: i.TaskID, RunID: i.RunID, Kind: i.Kind, Reason: i.Reason,
		Title: i.Title, Content: i.Content, Status: i.Status, Answer: i.Answer, Resolver: i.Resolver, Version: i.Version,
		CreatedAt: i.CreatedAt, ResolvedAt: i.ResolvedAt}
}

// listInbox serves GET /v1/projects/{id}/inbox[?all=true&limit=n]: the
// project's open items (all items with all=true), newest first.
func (a *API) listInbox(w http.ResponseWriter, r *http.Request) error {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > 1000 {
			return validation("limit must be 1 to 1000")
		}
	}
	items, err := agentsql.ListInbox(r.Context(), a.pool, accessOf(r).id, r.URL.Query().Get("all") != "true", limit)
	if err != nil {
		return err
	}
	out := make([]inboxItem, len(items))
	for i, it := range items {
		out[i] = toItem(it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
	return nil
}

// closeInbox serves POST /v1/inbox/{id}/close for items that need no
// answer; a question the agent asked is answered with POST
// /v1/tasks/{task_id}/answer, which also resumes the task.
func (a *API) closeInbox(w http.ResponseWriter, r *http.Request) error {
	acc := accessOf(r)
	if it := acc.item; it.Kind == agentsql.InboxAwaitUserInput && it.Reason == "question" && it.Status == "open" {
		return &apiError{http.StatusConflict, CodeAnswerRequired, "this item is a question: answer it with POST /v1/tasks/{task_id}/answer"}
	}
	closed, err := agentsql.CloseInboxItem(r.Context(), a.pool, acc.id, actor(acc.claims))
	if errors.Is(err, agentsql.ErrInboxItemNotFound) {
		return &apiError{http.StatusConflict, CodeIllegal, "inbox item is already closed"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toItem(closed))
	return nil
}
