package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	agentsql "github.com/agentworker/agentworker/sql"
)

const (
	allowed    = "https://app.example"
	disallowed = "https://evil.example"
)

// TestEveryRouteAnswersCORSAlike walks the route table: every route, and
// the API's answers for the rest of /v1, carry CORS for an allowed origin,
// errors included, none for another origin, and the one error body.
func TestEveryRouteAnswersCORSAlike(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{origins: []string{allowed}})
	off := setup(t, envOpts{origins: []string{allowed}, noAuth: true})
	projectID := uuid.New()
	task := e.newTask(t, projectID)
	item, _, err := agentsql.OpenInboxItem(t.Context(), e.pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxTaskCompleted, Reason: "completed", Title: "done"})
	if err != nil {
		t.Fatal(err)
	}
	name := "routes"
	agent, err := agentsql.CreateAgent(t.Context(), e.pool, projectID, agentsql.AgentFields{Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	existing := map[string]uuid.UUID{"project": projectID, "task": task.ID, "inbox": item.ID, "agent": agent.ID}
	otherProject := e.token(t, "", "authenticated", uuid.New())
	service := e.token(t, "", auth.RoleService)

	routes := api.Routes(e.api)
	if len(routes) < 10 {
		t.Fatalf("route table has %d routes: %v", len(routes), routes)
	}
	for _, rt := range routes {
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			t.Parallel()
			path := strings.Replace(rt.Path, "{id}", existing[rt.Scope].String(), 1)
			from := func(origin string) map[string]string { return map[string]string{"Origin": origin} }

			pre := e.call(t, http.MethodOptions, path, "", "", map[string]string{"Origin": allowed,
				"Access-Control-Request-Method": rt.Method, "Access-Control-Request-Headers": "authorization, content-type"})
			if pre.status != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != allowed ||
				!strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), rt.Method) ||
				!strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), "Authorization") {
				t.Errorf("preflight: %d %v", pre.status, pre.header)
			}
			if rp := e.call(t, http.MethodOptions, path, "", "", map[string]string{"Origin": disallowed, "Access-Control-Request-Method": rt.Method}); rp.header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("preflight from %s allowed: %v", disallowed, rp.header)
			}

			type refusal struct {
				name  string
				env   *env
				path  string
				token string
				want  int
			}
			cases := []refusal{
				{"NoToken", e, path, "", http.StatusUnauthorized},
				{"OtherProject", e, path, otherProject, http.StatusForbidden},
				{"AuthOff", off, path, service, http.StatusServiceUnavailable},
			}
			if rt.Scope != "project" {
				cases = append(cases, refusal{"Missing", e, strings.Replace(rt.Path, "{id}", uuid.NewString(), 1), service, http.StatusNotFound})
			}
			for _, c := range cases {
				rp := c.env.call(t, rt.Method, c.path, c.token, "", from(allowed))
				if rp.status != c.want {
					t.Errorf("%s: status %d, want %d (%s)", c.name, rp.status, c.want, rp.body)
				}
				errorCode(t, rp)
				if rp.header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: X-Content-Type-Options %q, want nosniff", c.name, rp.header.Get("X-Content-Type-Options"))
				}
				if got := rp.header.Get("Access-Control-Allow-Origin"); got != allowed {
					t.Errorf("%s: Access-Control-Allow-Origin %q, want %q", c.name, got, allowed)
				}
				if rp := c.env.call(t, rt.Method, c.path, c.token, "", from(disallowed)); rp.status != c.want || rp.header.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("%s from %s: status %d, Access-Control-Allow-Origin %q", c.name, disallowed, rp.status, rp.header.Get("Access-Control-Allow-Origin"))
				}
			}
		})
	}

	// The API's answers outside the table: an unknown path and a known one
	// under another method.
	tok := e.token(t, "", "", projectID)
	for _, c := range []struct {
		name, method, path string
		want               int
	}{
		{"UnknownPath", "GET", "/v1/nothing/here", http.StatusNotFound},
		{"WrongMethod", "DELETE", "/v1/tasks/" + task.ID.String() + "/cancel", http.StatusMethodNotAllowed},
		{"GetAPost", "GET", "/v1/tasks/" + task.ID.String() + "/retry", http.StatusMethodNotAllowed},
	} {
		rp := e.call(t, c.method, c.path, tok, "", map[string]string{"Origin": allowed})
		if rp.status != c.want || rp.header.Get("Access-Control-Allow-Origin") != allowed {
			t.Errorf("%s: status %d (want %d), Access-Control-Allow-Origin %q", c.name, rp.status, c.want, rp.header.Get("Access-Control-Allow-Origin"))
		}
		errorCode(t, rp)
		if rp.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", c.name, rp.header.Get("X-Content-Type-Options"))
		}
		if rp := off.call(t, c.method, c.path, tok, "", nil); rp.status != http.StatusServiceUnavailable {
			t.Errorf("%s with auth off: status %d, want 503", c.name, rp.status)
		}
	}
	if rp := e.call(t, "DELETE", "/v1/tasks/"+task.ID.String()+"/cancel", tok, "", nil); rp.header.Get("Allow") != "POST" {
		t.Errorf("405 Allow %q, want POST", rp.header.Get("Allow"))
	}
}

// TestForgeableRequestsRefused walks the route table: a token in the query
// is taken only by the event streams (EventSource cannot set a header), and
// a write must be application/json, so a page of another origin cannot send
// one without a preflight.
func TestForgeableRequestsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	task := e.newTask(t, projectID)
	item, _, err := agentsql.OpenInboxItem(t.Context(), e.pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxTaskCompleted, Reason: "completed", Title: "done"})
	if err != nil {
		t.Fatal(err)
	}
	existing := map[string]uuid.UUID{"project": projectID, "task": task.ID, "inbox": item.ID}
	tok := e.token(t, "", "authenticated", projectID)
	const body = `{"type":"chat","prompt":"forged"}`
	for _, rt := range api.Routes(e.api) {
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			t.Parallel()
			path := strings.Replace(rt.Path, "{id}", existing[rt.Scope].String(), 1)
			if rt.Stream {
				return // TestCreateTask follows a stream with the token in the query
			}
			rp := e.call(t, rt.Method, path+"?access_token="+tok, "", body, nil)
			if rp.status != http.StatusUnauthorized {
				t.Errorf("token in the query: status %d, want 401 (%s)", rp.status, rp.body)
			}
			if rt.Method != http.MethodPost {
				return
			}
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
				rp := e.call(t, rt.Method, path, tok, body, map[string]string{"Content-Type": ct})
				if rp.status != http.StatusUnsupportedMediaType || errorCode(t, rp) != api.CodeUnsupportedMediaType {
					t.Errorf("Content-Type %q: status %d, want 415 (%s)", ct, rp.status, rp.body)
				}
			}
		})
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), "SELECT count(*) FROM ai_tasks WHERE prompt = 'forged'").Scan(&n); err != nil || n != 0 {
		t.Errorf("forged requests created %d tasks (%v)", n, err)
	}
}
