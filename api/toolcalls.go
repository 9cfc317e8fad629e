package api

import (
	"net/http"

	agentsql "github.com/agentworker/agentworker/sql"
)

// maxPendingCalls bounds the approvals queue of a project.
const maxPendingCalls = 500

// ToolCallList is the answer of GET /v1/tasks/{id}/tool-calls and GET
// /v1/projects/{id}/tool-calls.
type ToolCallList struct {
	ToolCalls []agentsql.ToolApproval `json:"tool_calls"`
}

// listToolCalls serves GET /v1/tasks/{id}/tool-calls: the task's calls
// that asked for approval, pending and answered, oldest first.
func (a *API) listToolCalls(w http.ResponseWriter, r *http.Request) error {
	calls, err := agentsql.ToolApprovals(r.Context(), a.pool, accessOf(r).id)
	if err != nil {
		return err
	}
	writeToolCalls(w, calls)
	return nil
}

// pendingToolCalls serves GET /v1/projects/{id}/tool-calls[?limit=n]: the
// approvals queue, the project's calls waiting for an answer, oldest first.
func (a *API) pendingToolCalls(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", 100, maxPendingCalls)
	if err != nil {
		return err
	}
	calls, err := agentsql.PendingToolApprovals(r.Context(), a.pool, accessOf(r).id, limit)
	if err != nil {
		return err
	}
	writeToolCalls(w, calls)
	return nil
}

func writeToolCalls(w http.ResponseWriter, calls []agentsql.ToolApproval) {
	if calls == nil {
		calls = []agentsql.ToolApproval{}
	}
	writeJSON(w, http.StatusOK, ToolCallList{ToolCalls: calls})
}
