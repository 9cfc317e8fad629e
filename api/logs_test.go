package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
)

func TestLogsEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	good := e.token(t, "alice", "", projectID)
	task := e.newTask(t, projectID)
	for _, m := range []struct{ level, message string }{{"info", "one"}, {"warn", "two disk"}, {"info", "three disk"}} {
		if _, err := e.pool.Exec(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
			VALUES ($1, $2, 'log', jsonb_build_object('level', $3::text, 'message', $4::text))`, task.ID, projectID, m.level, m.message); err != nil {
			t.Fatal(err)
		}
	}
	path := func(q url.Values) string { return "/v1/projects/" + projectID.String() + "/logs?" + q.Encode() }
	read := func(t *testing.T, q url.Values) api.Logs {
		t.Helper()
		rp := e.call(t, http.MethodGet, path(q), good, "", nil)
		if rp.status != http.StatusOK {
			t.Fatalf("%s: status %d (body %s)", q.Encode(), rp.status, rp.body)
		}
		var l api.Logs
		if err := json.Unmarshal(rp.body, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}

	l := read(t, url.Values{"q": {"DISK"}, "limit": {"1"}})
	if len(l.Logs) != 1 || l.Logs[0].Message != "three disk" || l.Next == "" {
		t.Fatalf("first page: %+v", l)
	}
	l = read(t, url.Values{"q": {"DISK"}, "limit": {"1"}, "before": {l.Next}})
	if len(l.Logs) != 1 || l.Logs[0].Message != "two disk" || l.Logs[0].Level != "warn" {
		t.Fatalf("second page: %+v", l)
	}
	if l := read(t, url.Values{"level": {"info"}, "task": {task.ID.String()}}); len(l.Logs) != 2 || l.Next != "" {
		t.Errorf("info of the task: %+v", l)
	}

	for _, tt := range []struct {
		name  string
		path  string
		token string
		want  int
		code  string
	}{
		{"OtherProject", path(nil), e.token(t, "mallory", "", uuid.New()), http.StatusForbidden, api.CodeForbidden},
		{"NoToken", path(nil), "", http.StatusUnauthorized, api.CodeUnauthorized},
		{"BadTask", path(url.Values{"task": {"x"}}), good, http.StatusBadRequest, api.CodeValidation},
		{"BadRun", path(url.Values{"run": {"x"}}), good, http.StatusBadRequest, api.CodeValidation},
		{"BadCursor", path(url.Values{"before": {"abc"}}), good, http.StatusBadRequest, api.CodeValidation},
		{"BadLimit", path(url.Values{"limit": {"1000"}}), good, http.StatusBadRequest, api.CodeValidation},
	} {
		rp := e.call(t, http.MethodGet, tt.path, tt.token, "", nil)
		if rp.status != tt.want {
			t.Errorf("%s: status %d, want %d (body %s)", tt.name, rp.status, tt.want, rp.body)
			continue
		}
		if code := errorCode(t, rp); code != tt.code {
			t.Errorf("%s: code %s, want %s", tt.name, code, tt.code)
		}
	}
}
