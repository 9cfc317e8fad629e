package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

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
