package sql_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/postgresttest"
)

// TestPostgREST goes through a real PostgREST 12, as a Supabase app does:
// tokens in the auth package's claim shape, PostgREST switching to the
// token's role and setting request.jwt.claims for every request.
func TestPostgREST(t *testing.T) {
	t.Parallel()
	const secret = "postgrest-test-secret-of-32-bytes!"
	dbURL := dbtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := postgresttest.Start(t, postgresttest.Config{DatabaseURL: postgresttest.AuthenticatorURL(t, dbURL), JWTSecret: secret})
	f := seedIsolation(t, pool)

	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	token := func(role string, exp time.Duration, projects ...uuid.UUID) string {
		c := auth.Claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
			Subject: role + "-user", ExpiresAt: jwt.NewNumericDate(time.Now().Add(exp))}}
		for _, p := range projects {
			c.Projects = append(c.Projects, p.String())
		}
		s, err := verifier.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	user := token("authenticated", time.Hour, f.own)
	service := token("service_role", time.Hour)
	expired := token("authenticated", -time.Minute, f.own)
	missing := uuid.New()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	type response struct {
		status int
		body   string
	}
	do := func(t *testing.T, method, path, bearer, body string) response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "return=representation")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{resp.StatusCode, string(b)}
	}
	rows := func(t *testing.T, r response) []map[string]any {
		t.Helper()
		var out []map[string]any
		if err := json.Unmarshal([]byte(r.body), &out); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		return out
	}
	projectsOf := func(t *testing.T, r response) []string {
		t.Helper()
		var ps []string
		for _, row := range rows(t, r) {
			ps = append(ps, row["project_id"].(string))
		}
		return ps
	}
	newTask := func(project uuid.UUID) string {
		return `{"project_id": "` + project.String() + `", "type": "chat", "prompt": "hello"}`
	}
	cancel := func(task uuid.UUID) string { return `{"task_id": "` + task.String() + `"}` }

	tests := []struct {
		name   string
		method string
		path   string
		bearer string
		body   string
		status int
		check  func(t *testing.T, r response)
	}{
		{"ReadOwnTasks", "GET", "/ai_tasks", user, "", 200, func(t *testing.T, r response) {
			ps := projectsOf(t, r)
			if len(ps) == 0 {
				t.Errorf("no task read, want the %s project's", f.own)
			}
			for _, p := range ps {
				if p != f.own.String() {
					t.Errorf("projects of the tasks read = %v, want only %s", ps, f.own)
					break
				}
			}
		}},
		{"ReadOtherTask", "GET", "/ai_tasks?id=eq." + f.otherTask.String(), user, "", 200, func(t *testing.T, r response) {
			if n := len(rows(t, r)); n != 0 {
				t.Errorf("read %d of another project's tasks", n)
			}
		}},
		{"ReadOwnEvents", "GET", "/agent_events?task_id=eq." + f.ownTask.String(), user, "", 200, func(t *testing.T, r response) {
			if n := len(rows(t, r)); n == 0 {
				t.Error("no events of the token's own task")
			}
		}},
		{"ReadOtherEvents", "GET", "/agent_events?project_id=eq." + f.other.String(), user, "", 200, func(t *testing.T, r response) {
			if n := len(rows(t, r)); n != 0 {
				t.Errorf("read %d of another project's events", n)
			}
		}},
		// Embedding runs on computed relationships (agent_events.task_id has
		// no foreign key): a task with its events, an event with its task.
		{"EmbedEventsOfTask", "GET", "/ai_tasks?select=id,agent_events(seq,type)&id=eq." + f.ownTask.String(), user, "", 200, func(t *testing.T, r response) {
			got := rows(t, r)
			if len(got) != 1 {
				t.Fatalf("read %d tasks, want 1: %s", len(got), r.body)
			}
			evs, _ := got[0]["agent_events"].([]any)
			if len(evs) == 0 {
				t.Errorf("task read without its events: %s", r.body)
			}
		}},
		{"EmbedTaskOfEvent", "GET", "/agent_events?select=seq,ai_tasks(id,project_id)&task_id=eq." + f.ownTask.String(), user, "", 200, func(t *testing.T, r response) {
			got := rows(t, r)
			if len(got) == 0 {
				t.Fatalf("no events read: %s", r.body)
			}
			for _, ev := range got {
				task, _ := ev["ai_tasks"].(map[string]any)
				if task["id"] != f.ownTask.String() || task["project_id"] != f.own.String() {
					t.Errorf("event embeds task %v, want %s of %s (one object)", ev["ai_tasks"], f.ownTask, f.own)
				}
			}
		}},
		{"EmbedOtherTaskEvents", "GET", "/ai_tasks?select=id,agent_events(seq)&id=eq." + f.otherTask.String(), user, "", 200, func(t *testing.T, r response) {
			if n := len(rows(t, r)); n != 0 {
				t.Errorf("read %d of another project's tasks through an embedding", n)
			}
		}},
		{"ReadOwnUsage", "GET", "/project_usage_daily", user, "", 200, func(t *testing.T, r response) {
			// A project has a row a day and model: its runs' and the
			// rollup's of its deleted ones.
			if ps := slices.Compact(slices.Sorted(slices.Values(projectsOf(t, r)))); len(ps) != 1 || ps[0] != f.own.String() {
				t.Errorf("usage read for projects %v, want only %s", ps, f.own)
			}
		}},
		{"ReadCheckpoints", "GET", "/task_checkpoints", user, "", 403, nil},
		{"ReadRiverJobs", "GET", "/river_job", user, "", 403, nil},
		{"CreateOwn", "POST", "/ai_tasks", user, newTask(f.own), 201, func(t *testing.T, r response) {
			row := rows(t, r)[0]
			if row["status"] != "queued" {
				t.Errorf("created task %v, want queued", row)
			}
			var jobs int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args ->> 'task_id' = $1`, row["id"]).Scan(&jobs); err != nil || jobs != 1 {
				t.Errorf("river jobs of the created task = %d, %v; want 1", jobs, err)
			}
		}},
		{"CreateOther", "POST", "/ai_tasks", user, newTask(f.other), 403, nil},
		{"CreateRunning", "POST", "/ai_tasks", user, `{"project_id": "` + f.own.String() + `", "type": "chat", "status": "running"}`, 403, nil},
		{"CancelOwn", "POST", "/rpc/agentworker_cancel_task", user, cancel(f.ownTask), 200, func(t *testing.T, r response) {
			if !strings.Contains(r.body, `"outcome": "applied"`) {
				t.Errorf("cancel own task: %s", r.body)
			}
		}},
		{"CancelOther", "POST", "/rpc/agentworker_cancel_task", user, cancel(f.otherTask), 200, func(t *testing.T, r response) {
			none := do(t, "POST", "/rpc/agentworker_cancel_task", user, cancel(missing))
			if strings.ReplaceAll(r.body, f.otherTask.String(), missing.String()) != none.body {
				t.Errorf("another project's task: %s; a missing task: %s", r.body, none.body)
			}
		}},
		{"InternalFunction", "POST", "/rpc/agentworker_control_task", user, `{"p_task_id": "` + f.ownTask.String() + `", "p_action": "cancel"}`, 403, nil},
		{"AnonReads", "GET", "/ai_tasks", "", "", 401, nil},
		{"AnonCreates", "POST", "/ai_tasks", "", newTask(f.own), 401, nil},
		{"AnonCancels", "POST", "/rpc/agentworker_cancel_task", "", cancel(f.ownTask), 401, nil},
		{"ExpiredToken", "GET", "/ai_tasks", expired, "", 401, nil},
		{"ServiceReadsAll", "GET", "/ai_tasks?order=project_id", service, "", 200, func(t *testing.T, r response) {
			ps := projectsOf(t, r)
			if !slices.Contains(ps, f.own.String()) || !slices.Contains(ps, f.other.String()) {
				t.Errorf("service_role read projects %v, want both %s and %s", ps, f.own, f.other)
			}
		}},
		{"ServiceCancelsOther", "POST", "/rpc/agentworker_cancel_task", service, cancel(f.otherTask), 200, func(t *testing.T, r response) {
			if !strings.Contains(r.body, `"outcome": "applied"`) {
				t.Errorf("service_role cancels another project's task: %s", r.body)
			}
		}},
		{"ServiceReadsCheckpoints", "GET", "/task_checkpoints", service, "", 403, nil},
	}
	var table []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, tt.path, tt.bearer, tt.body)
			if r.status != tt.status {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, r.status, r.body, tt.status)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
			table = append(table, "| "+tt.name+" | "+tt.method+" "+strings.SplitN(tt.path, "?", 2)[0]+" | "+http.StatusText(r.status)+" |")
		})
	}
	if testing.Verbose() {
		t.Logf("through PostgREST:\n%s", strings.Join(table, "\n"))
	}
}
