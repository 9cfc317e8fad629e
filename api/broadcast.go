package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// BroadcastRequest is the body of POST /v1/projects/{id}/tasks/broadcast/{command}.
// Empty, the command goes to the project's running tasks.
type BroadcastRequest struct {
	// Statuses targets the project's tasks in these statuses.
	Statuses []agentsql.Status `json:"statuses,omitempty"`
	// TaskIDs targets these tasks of the project (with Statuses, those of
	// them in one of the statuses).
	TaskIDs []uuid.UUID `json:"task_ids,omitempty"`
	// ExpectedVersions holds, per task id, the version it must be at.
	ExpectedVersions map[uuid.UUID]int `json:"expected_versions,omitempty"`
}

// BroadcastResponse lists every targeted task's outcome, in task id order,
// and counts them by outcome.
type BroadcastResponse struct {
	Command agentsql.Action          `json:"command"`
	Results []agentsql.ControlResult `json:"results"`
	Counts  map[string]int           `json:"counts"`
}

// maxBroadcastIDs bounds the ids one broadcast names; statuses reach more.
const maxBroadcastIDs = 10000

// broadcast applies command to the project's tasks, each through the
// control function alone, a batch per transaction: a task refused is an
// outcome in the answer (200), not a failure of the request.
func (a *API) broadcast(command agentsql.Action) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		acc := accessOf(r)
		var req BroadcastRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTaskBody))
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return errTooLarge
			}
			return validation("could not read the request body")
		}
		if len(body) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return validation(`body must be {"statuses": [...], "task_ids": [...], "expected_versions": {"<task id>": n}}: %v`, err)
			}
		}
		for _, st := range req.Statuses {
			if !slices.Contains(agentsql.Statuses, st) && st != agentsql.StatusWaiting {
				return validation("unknown status %q", st)
			}
		}
		if len(req.TaskIDs) > maxBroadcastIDs {
			return validation("at most %d task_ids in one broadcast; target by statuses for more", maxBroadcastIDs)
		}
		res, err := agentsql.Broadcast(r.Context(), a.pool, acc.id, command, agentsql.BroadcastOpts{
			Statuses: req.Statuses, TaskIDs: req.TaskIDs, ExpectedVersions: req.ExpectedVersions, Actor: actor(acc.claims)})
		if err != nil {
			return err
		}
		counts := map[string]int{}
		for _, r := range res {
			counts[r.Outcome]++
		}
		if res == nil {
			res = []agentsql.ControlResult{}
		}
		writeJSON(w, http.StatusOK, BroadcastResponse{Command: command, Results: res, Counts: counts})
		return nil
	}
}
