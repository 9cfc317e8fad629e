package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/traceid"
)

// TestTraceIDHeader: every answer, a refusal and a preflight included,
// carries the request's X-Trace-ID when it is safe to repeat, else a new
// one; a page of an allowed origin may send and read it.
func TestTraceIDHeader(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{origins: []string{"https://app.example"}})
	project := uuid.New()
	path := "/v1/projects/" + project.String() + "/tasks"
	good := e.token(t, "alice", "", project)
	for _, tc := range []struct {
		name, method, token, sent string
		status                    int
		echoed                    bool
	}{
		{"Given", http.MethodGet, good, "req-1.a_b", http.StatusOK, true},
		{"GivenOnARefusal", http.MethodGet, "", "req-2", http.StatusUnauthorized, true},
		{"GivenOnAPreflight", http.MethodOptions, "", "req-3", http.StatusNoContent, true},
		{"None", http.MethodGet, good, "", http.StatusOK, false},
		{"TooLong", http.MethodGet, good, strings.Repeat("a", traceid.MaxLen+1), http.StatusOK, false},
		{"BadChars", http.MethodGet, good, "a<b>", http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := map[string]string{"Origin": "https://app.example"}
			if tc.sent != "" {
				h[traceid.Header] = tc.sent
			}
			rp := e.call(t, tc.method, path, tc.token, "", h)
			got := rp.header.Get(traceid.Header)
			if rp.status != tc.status || tc.echoed != (got == tc.sent) || !traceid.Valid(got) {
				t.Fatalf("sent %q: status %d, X-Trace-ID %q; want %d, echoed=%t, valid", tc.sent, rp.status, got, tc.status, tc.echoed)
			}
			if exp := rp.header.Get("Access-Control-Expose-Headers"); !strings.Contains(exp, traceid.Header) {
				t.Errorf("Access-Control-Expose-Headers %q: a page cannot read the trace id", exp)
			}
		})
	}
}

// TestTraceparent: a task created with a W3C traceparent is in the
// caller's trace: the answer's X-Trace-ID and the task's trace_id are the
// traceparent's trace id (over an X-Trace-ID sent too), and the task's
// trace_parent the caller's span, so the attempts' spans join it. A
// malformed traceparent is ignored.
func TestTraceparent(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	token := e.token(t, "alice", "", project)
	for _, tc := range []struct {
		name, traceparent, trace, parent string
	}{
		{"Valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"Malformed", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "req-9", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rp := e.call(t, http.MethodPost, "/v1/projects/"+project.String()+"/tasks", token, `{"type": "chat", "prompt": "hi"}`,
				map[string]string{"traceparent": tc.traceparent, traceid.Header: "req-9"})
			if rp.status != http.StatusCreated {
				t.Fatalf("status %d: %s", rp.status, rp.body)
			}
			var view api.TaskView
			if err := json.Unmarshal(rp.body, &view); err != nil {
				t.Fatal(err)
			}
			task, err := agentsql.GetTask(t.Context(), e.pool, view.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := rp.header.Get(traceid.Header); got != tc.trace || task.TraceID != tc.trace || task.TraceParent != tc.parent {
				t.Errorf("X-Trace-ID %q, stored trace %q parent %q; want %q and %q", got, task.TraceID, task.TraceParent, tc.trace, tc.parent)
			}
		})
	}
}
