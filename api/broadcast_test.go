package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
)

// running returns a task of project moved to running (no worker holds it).
func (e *env) running(t *testing.T, projectID uuid.UUID) agentsql.Task {
	t.Helper()
	task := e.newTask(t, projectID)
	if _, err := e.pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'running' WHERE id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	return task
}

func TestBroadcastEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	good := e.token(t, "alice", "", projectID)
	path := func(command string) string {
		return "/v1/projects/" + projectID.String() + "/tasks/broadcast/" + command
	}

	refusals := []struct {
		name     string
		path     string
		token    string
		body     string
		header   map[string]string
		want     int
		wantCode string
	}{
		{"NoToken", path("cancel"), "", "", nil, http.StatusUnauthorized, api.CodeUnauthorized},
		{"OtherProject", path("cancel"), e.token(t, "mallory", "", uuid.New()), "", nil, http.StatusForbidden, api.CodeForbidden},
		{"NotJSON", path("cancel"), good, `{}`, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType},
		{"BadBody", path("cancel"), good, `{"statuses": "running"}`, nil, http.StatusBadRequest, api.CodeValidation},
		{"UnknownField", path("cancel"), good, `{"status": ["running"]}`, nil, http.StatusBadRequest, api.CodeValidation},
		{"UnknownStatus", path("cancel"), good, `{"statuses": ["sleeping"]}`, nil, http.StatusBadRequest, api.CodeValidation},
		{"Answer", path("answer"), good, "", nil, http.StatusNotFound, api.CodeNotFound},
	}
	for _, tt := range refusals {
		rp := e.call(t, http.MethodPost, tt.path, tt.token, tt.body, tt.header)
		if rp.status != tt.want {
			t.Errorf("%s: status %d, want %d (body %s)", tt.name, rp.status, tt.want, rp.body)
			continue
		}
		if code := errorCode(t, rp); code != tt.wantCode {
			t.Errorf("%s: error code %s, want %s", tt.name, code, tt.wantCode)
		}
	}

	r1, r2 := e.running(t, projectID), e.running(t, projectID)
	queued := e.newTask(t, projectID)
	foreign := e.running(t, uuid.New())
	send := func(t *testing.T, command, body string) api.BroadcastResponse {
		t.Helper()
		rp := e.call(t, http.MethodPost, path(command), good, body, nil)
		if rp.status != http.StatusOK {
			t.Fatalf("%s %s: status %d (body %s)", command, body, rp.status, rp.body)
		}
		var br api.BroadcastResponse
		if err := json.Unmarshal(rp.body, &br); err != nil {
			t.Fatal(err)
		}
		return br
	}
	outcome := func(br api.BroadcastResponse) map[uuid.UUID]string {
		m := map[uuid.UUID]string{}
		for _, r := range br.Results {
			m[r.TaskID] = r.Outcome
		}
		return m
	}

	// No body: the running tasks, with a pause request each.
	br := send(t, "pause", "")
	if got := outcome(br); len(got) != 2 || got[r1.ID] != "applied" || got[r2.ID] != "applied" || br.Counts["applied"] != 2 {
		t.Errorf("pause: %+v", br)
	}
	// Ids and versions: a stale version is a conflict, another project's
	// task not_found, the queued task applied.
	br = send(t, "cancel", fmt.Sprintf(`{"task_ids": [%q, %q, %q], "expected_versions": {%q: 99}}`,
		r1.ID, queued.ID, foreign.ID, r1.ID))
	got := outcome(br)
	if got[r1.ID] != "conflict" || got[queued.ID] != "applied" || got[foreign.ID] != "not_found" || len(got) != 3 {
		t.Errorf("cancel by ids: %v", got)
	}
	// By status: retry the cancelled one; nothing else moves.
	br = send(t, "retry", `{"statuses": ["cancelled"]}`)
	if got := outcome(br); len(got) != 1 || got[queued.ID] != "applied" {
		t.Errorf("retry cancelled: %v", got)
	}
	var foreignStatus string
	if err := e.pool.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, foreign.ID).Scan(&foreignStatus); err != nil {
		t.Fatal(err)
	}
	if foreignStatus != "running" {
		t.Errorf("another project's task is %s", foreignStatus)
	}
	var actor string
	if err := e.pool.QueryRow(t.Context(), `SELECT payload -> 'metadata' ->> 'actor' FROM agent_events
		WHERE task_id = $1 AND payload -> 'metadata' ->> 'audit' = 'true' ORDER BY seq DESC LIMIT 1`, queued.ID).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "user:alice" {
		t.Errorf("audit actor %q", actor)
	}
}
