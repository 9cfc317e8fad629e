package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// TestRefusalsAudited: every refused request — no or a bad token, an
// expired one, another project's task, a sensitive file, an illegal
// transition — writes one audit_log row naming its actor, the route, the
// outcome denied, the reason and the remote address; an allowed request
// or a malformed one writes none.
func TestRefusalsAudited(t *testing.T) {
	t.Parallel()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t, envOpts{store: store})
	project := uuid.New()
	task := e.newTask(t, project)
	alice := e.token(t, "alice", "", project)
	tests := []struct {
		name       string
		method     string
		path       string
		token      string
		want       int
		wantActor  string // "": no record
		wantAction string
		wantReason string
	}{
		{"NoToken", "GET", "/v1/tasks/" + task.ID.String(), "", http.StatusUnauthorized, "anonymous", "GET /v1/tasks/{id}", "unauthenticated"},
		{"BadToken", "GET", "/v1/tasks/" + task.ID.String(), "not-a-jwt", http.StatusUnauthorized, "anonymous", "GET /v1/tasks/{id}", "unauthenticated"},
		{"Expired", "GET", "/v1/tasks/" + task.ID.String(), e.tokenUntil(t, time.Now().Add(-time.Minute), "bob", "", project),
			http.StatusUnauthorized, "anonymous", "GET /v1/tasks/{id}", "expired"},
		{"OtherProjectsTask", "POST", "/v1/tasks/" + task.ID.String() + "/cancel", e.token(t, "mallory", "", uuid.New()),
			http.StatusForbidden, "user:mallory", "POST /v1/tasks/{id}/cancel", "forbidden"},
		{"SensitiveFile", "GET", "/v1/projects/" + project.String() + "/files/.env", alice,
			http.StatusForbidden, "user:alice", "GET /v1/projects/{id}/files/{path...}", api.CodeSensitiveFile},
		{"IllegalTransition", "POST", "/v1/tasks/" + task.ID.String() + "/resume", alice,
			http.StatusConflict, "user:alice", "POST /v1/tasks/{id}/resume", api.CodeIllegal},
		{"Allowed", "GET", "/v1/tasks/" + task.ID.String(), alice, http.StatusOK, "", "", ""},
		{"Malformed", "GET", "/v1/projects/" + project.String() + "/logs?limit=x", alice, http.StatusBadRequest, "", "", ""},
	}
	for _, tt := range tests { // in order: each adds at most the last row
		before, err := agentsql.AuditLog(t.Context(), e.pool, "")
		if err != nil {
			t.Fatal(err)
		}
		rp := e.call(t, tt.method, tt.path, tt.token, "", nil)
		if rp.status != tt.want {
			t.Fatalf("%s: status %d, want %d (body %s)", tt.name, rp.status, tt.want, rp.body)
		}
		after, err := agentsql.AuditLog(t.Context(), e.pool, "")
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantActor == "" {
			if len(after) != len(before) {
				t.Errorf("%s: audited %+v", tt.name, after[len(after)-1])
			}
			continue
		}
		if len(after) != len(before)+1 {
			t.Fatalf("%s: %d audit rows added, want 1", tt.name, len(after)-len(before))
		}
		got := after[len(after)-1]
		if got.Actor != tt.wantActor || got.Action != tt.wantAction || got.Outcome != "denied" ||
			!strings.Contains(got.Reason, tt.wantReason) || got.RemoteAddr != "127.0.0.1" || got.Resource != tt.path[:strings.IndexAny(tt.path+"?", "?")] {
			t.Errorf("%s: audit row %+v", tt.name, got)
		}
	}
}

// TestRefusalsAuditedAtMostPerActor: a flood of refusals by one actor
// records its allowance a minute, no more; another actor still gets its own.
func TestRefusalsAuditedAtMostPerActor(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{auditPerMinute: 3})
	task := e.newTask(t, uuid.New())
	mallory := e.token(t, "mallory", "", uuid.New())
	for range 20 {
		if rp := e.call(t, http.MethodGet, "/v1/tasks/"+task.ID.String(), mallory, "", nil); rp.status != http.StatusForbidden {
			t.Fatalf("status %d", rp.status)
		}
	}
	if rp := e.call(t, http.MethodGet, "/v1/tasks/"+task.ID.String(), e.token(t, "eve", "", uuid.New()), "", nil); rp.status != http.StatusForbidden {
		t.Fatalf("status %d", rp.status)
	}
	for actor, want := range map[string]int{"user:mallory": 3, "user:eve": 1} {
		rows, err := agentsql.AuditLog(t.Context(), e.pool, actor)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != want {
			t.Errorf("%s: %d audit rows, want %d", actor, len(rows), want)
		}
	}

	// The next minute's first record says how many were left out.
	take := api.RefusalLimiter(2)
	now := time.Now()
	var got []int
	for i := range 6 {
		if s, ok := take("k", now.Add(time.Duration(i)*time.Second)); ok {
			got = append(got, s)
		}
	}
	if s, ok := take("k", now.Add(time.Minute+time.Second)); !ok || s != 4 {
		t.Errorf("next minute: record %v, suppressed %d; want true, 4", ok, s)
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Errorf("first minute recorded %v, want two with nothing suppressed", got)
	}
}
