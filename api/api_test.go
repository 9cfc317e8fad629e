package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}

const secret = "test-secret-0123456789abcdef"

type env struct {
	pool     *pgxpool.Pool
	verifier *auth.Verifier
	api      *api.API
	srv      *httptest.Server
}

type envOpts struct {
	origins []string
	noAuth  bool          // JWT_SECRET unset
	store   storage.Store // for the files routes; nil: none configured
	log     io.Writer     // the API's log (text); nil: discarded
	// Caps of open event streams, per process and per token; 0: the
	// defaults.
	maxStreams, maxStreamsPerToken int
	auditPerMinute                 int           // refusals audited per actor a minute; 0: the default
	revocationCheck                time.Duration // how often open streams' tokens are checked; 0: the default
	prices                         llm.Prices    // besides the built-in list; nil: that list
	dayCap                         float64       // PROJECT_MAX_COST_USD_PER_DAY
}

// setup serves the API as agentworker serve wires it, on a fresh database.
func setup(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{pool: dbtest.New(t)}
	var err error
	if e.verifier, err = auth.NewVerifier(secret, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hub := sse.NewHub(e.pool, slog.New(slog.DiscardHandler))
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); _ = hub.Run(ctx) }()
	cfg := api.Config{AllowedOrigins: o.origins, Verifier: e.verifier, Store: o.store,
		MaxStreams: o.maxStreams, MaxStreamsPerToken: o.maxStreamsPerToken, AuditPerActorPerMinute: o.auditPerMinute,
		RevocationCheck: o.revocationCheck, ProjectMaxCostUSDPerDay: o.dayCap}
	if o.prices != nil {
		cfg.Prices = llm.DefaultPrices()
		maps.Copy(cfg.Prices, o.prices)
	}
	if o.log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(o.log, nil))
	}
	if o.noAuth {
		cfg.Verifier = nil
	}
	e.api = api.New(e.pool, sse.NewStreams(e.pool, hub, sse.Config{}), cfg)
	mux := http.NewServeMux()
	e.api.Register(mux)
	mux.Handle("GET /", http.NotFoundHandler()) // where agentworker serve has its page
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	e.srv.Start()
	t.Cleanup(func() { <-hubDone; e.srv.Close() })
	t.Cleanup(cancel) // first: streams end, then the server closes
	return e
}

// token signs a token for role and projects, valid for an hour.
func (e *env) token(t *testing.T, subject, role string, projects ...uuid.UUID) string {
	t.Helper()
	return e.tokenUntil(t, time.Now().Add(time.Hour), subject, role, projects...)
}

func (e *env) tokenUntil(t *testing.T, exp time.Time, subject, role string, projects ...uuid.UUID) string {
	t.Helper()
	return e.sign(t, auth.Claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{Subject: subject, ExpiresAt: jwt.NewNumericDate(exp)}}, projects...)
}

// sign signs c for projects besides its own.
func (e *env) sign(t *testing.T, c auth.Claims, projects ...uuid.UUID) string {
	t.Helper()
	for _, p := range projects {
		c.Projects = append(c.Projects, p.String())
	}
	tok, err := e.verifier.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *env) newTask(t *testing.T, projectID uuid.UUID) agentsql.Task {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: projectID, Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// reply is an answer read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// call sends a request; header holds extra request headers. A body is
// sent as application/json unless header says otherwise.
func (e *env) call(t *testing.T, method, path, token, body string, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// errorCode checks that rp is the API's one error body and returns its code.
func errorCode(t *testing.T, rp reply) string {
	t.Helper()
	if ct := rp.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("status %d: Content-Type %q, want application/json (body %s)", rp.status, ct, rp.body)
	}
	var b map[string]map[string]string
	dec := json.NewDecoder(strings.NewReader(string(rp.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || len(b) != 1 || len(b["error"]) != 2 || b["error"]["code"] == "" || b["error"]["message"] == "" {
		t.Errorf("status %d: body %s is not {\"error\":{\"code\",\"message\"}} (%v)", rp.status, rp.body, err)
	}
	return b["error"]["code"]
}

func TestControlEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	task := e.newTask(t, projectID)
	good := e.token(t, "alice", "", projectID)
	path := func(action string) string { return "/v1/tasks/" + task.ID.String() + "/" + action }
	tests := []struct {
		name     string
		path     string
		token    string
		body     string
		want     int
		wantCode string
	}{
		{"NoToken", path("cancel"), "", "", http.StatusUnauthorized, api.CodeUnauthorized},
		{"OtherProject", path("cancel"), e.token(t, "mallory", "", uuid.New()), "", http.StatusForbidden, api.CodeForbidden},
		{"NotFound", "/v1/tasks/" + uuid.NewString() + "/cancel", good, "", http.StatusForbidden, api.CodeForbidden},
		{"NotFoundService", "/v1/tasks/" + uuid.NewString() + "/cancel", e.token(t, "", auth.RoleService), "", http.StatusNotFound, api.CodeTaskNotFound},
		{"BadID", "/v1/tasks/nope/cancel", good, "", http.StatusBadRequest, api.CodeValidation},
		{"BadBody", path("cancel"), good, "{", http.StatusBadRequest, api.CodeValidation},
		{"StaleVersion", path("pause"), good, fmt.Sprintf(`{"expected_version": %d}`, task.Version+5), http.StatusConflict, api.CodeVersionConflict},
		{"Illegal", path("resume"), good, "", http.StatusConflict, api.CodeIllegal},
		{"AnswerRequired", path("answer"), good, `{}`, http.StatusBadRequest, api.CodeValidation},
		{"Pause", path("pause"), good, fmt.Sprintf(`{"expected_version": %d}`, task.Version), http.StatusOK, ""},
		{"Resume", path("resume"), good, "", http.StatusOK, ""},
		{"Cancel", path("cancel"), good, "", http.StatusOK, ""},
		{"CancelAgain", path("cancel"), good, "", http.StatusConflict, api.CodeIllegal},
		{"Retry", path("retry"), good, "", http.StatusOK, ""},
	}
	for _, tt := range tests { // in order: the steps share one task
		rp := e.call(t, http.MethodPost, tt.path, tt.token, tt.body, nil)
		if rp.status != tt.want {
			t.Fatalf("%s: status %d, want %d (body %s)", tt.name, rp.status, tt.want, rp.body)
		}
		if tt.wantCode != "" {
			if code := errorCode(t, rp); code != tt.wantCode {
				t.Errorf("%s: error code %s, want %s (body %s)", tt.name, code, tt.wantCode, rp.body)
			}
		}
	}
	var actors []string
	rows, err := e.pool.Query(t.Context(), `SELECT payload -> 'metadata' ->> 'actor' FROM agent_events
		WHERE task_id = $1 AND payload -> 'metadata' ->> 'audit' = 'true' ORDER BY seq`, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		actors = append(actors, a)
	}
	// Stale version, illegal resume, missing answer, pause, resume, cancel,
	// cancel again, retry: eight audited actions, all by alice.
	if len(actors) != 8 || actors[0] != "user:alice" {
		t.Errorf("audit actors = %v", actors)
	}
}

// TestNoExistenceOracle: a bearer limited to its projects cannot tell a task
// or inbox item of another project from a missing one, on any route.
func TestNoExistenceOracle(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	mine, theirs := uuid.New(), uuid.New()
	task := e.newTask(t, theirs)
	item, _, err := agentsql.OpenInboxItem(t.Context(), e.pool, agentsql.InboxItem{ProjectID: theirs, Kind: agentsql.InboxTaskCompleted, Reason: "completed", Title: "done"})
	if err != nil {
		t.Fatal(err)
	}
	tok := e.token(t, "", "authenticated", mine)
	for _, rt := range api.Routes(e.api) {
		if rt.Scope == "project" {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			t.Parallel()
			existing := map[string]uuid.UUID{"task": task.ID, "inbox": item.ID}[rt.Scope]
			other := e.call(t, rt.Method, strings.Replace(rt.Path, "{id}", existing.String(), 1), tok, "", nil)
			missing := e.call(t, rt.Method, strings.Replace(rt.Path, "{id}", uuid.NewString(), 1), tok, "", nil)
			if other.status != http.StatusForbidden || other.status != missing.status || string(other.body) != string(missing.body) {
				t.Errorf("another project's: %d %s; missing: %d %s; want both 403 alike", other.status, other.body, missing.status, missing.body)
			}
		})
	}
}

func TestInboxEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "bob", "", projectID)
	other := e.token(t, "", "", uuid.New())
	done, _, err := agentsql.OpenInboxItem(t.Context(), e.pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxTaskCompleted, Reason: "completed", Title: "done"})
	if err != nil {
		t.Fatal(err)
	}
	question, _, err := agentsql.OpenInboxItem(t.Context(), e.pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxAwaitUserInput, Title: "which db?"})
	if err != nil {
		t.Fatal(err)
	}
	items := func(rp reply) int {
		var b struct{ Items []json.RawMessage }
		if err := json.Unmarshal(rp.body, &b); err != nil {
			t.Fatalf("list body %s: %v", rp.body, err)
		}
		return len(b.Items)
	}
	list := "/v1/projects/" + projectID.String() + "/inbox"
	closeURL := func(id uuid.UUID) string { return "/v1/inbox/" + id.String() + "/close" }
	if rp := e.call(t, "GET", list, other, "", nil); rp.status != http.StatusForbidden {
		t.Errorf("list with another project's token: %d", rp.status)
	}
	if rp := e.call(t, "GET", list+"?limit=0", tok, "", nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
		t.Errorf("list with limit=0: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "GET", list, tok, "", nil); rp.status != http.StatusOK || items(rp) != 2 {
		t.Fatalf("list: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", closeURL(question.ID), tok, "", nil); rp.status != http.StatusConflict || errorCode(t, rp) != api.CodeAnswerRequired {
		t.Errorf("closing a question without answering: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", closeURL(done.ID), other, "", nil); rp.status != http.StatusForbidden {
		t.Errorf("closing with another project's token: %d", rp.status)
	}
	if rp := e.call(t, "POST", closeURL(uuid.New()), e.token(t, "", auth.RoleService), "", nil); rp.status != http.StatusNotFound || errorCode(t, rp) != api.CodeNotFound {
		t.Errorf("closing a missing item as service: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", closeURL(done.ID), tok, "", nil); rp.status != http.StatusOK || !strings.Contains(string(rp.body), `"resolver":"user:bob"`) {
		t.Errorf("close: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", closeURL(done.ID), tok, "", nil); rp.status != http.StatusConflict {
		t.Errorf("closing twice: %d", rp.status)
	}
	if rp := e.call(t, "GET", list, tok, "", nil); rp.status != http.StatusOK || items(rp) != 1 {
		t.Errorf("open items after close: %d %s", rp.status, rp.body)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectA, projectB := uuid.New(), uuid.New()
	taskB := e.newTask(t, projectB)
	tokenA := e.token(t, "", "authenticated", projectA)
	expired := e.tokenUntil(t, time.Now().Add(-time.Minute), "", "", projectB)
	other, err := auth.NewVerifier("another-secret-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Sign(auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	taskURL := "/v1/tasks/" + taskB.ID.String() + "/events"
	projectURL := "/v1/projects/" + projectB.String() + "/events"
	submitURL := "/v1/projects/" + projectB.String() + "/tasks"

	tests := []struct {
		name   string
		method string
		url    string
		token  string
		query  bool // token in ?access_token= instead of the header
		want   int
	}{
		{name: "TaskNoToken", url: taskURL, want: 401},
		{name: "TaskBadToken", url: taskURL, token: "not.a.jwt", want: 401},
		{name: "TaskExpired", url: taskURL, token: expired, want: 401},
		{name: "TaskOtherSecret", url: taskURL, token: foreign, want: 401},
		{name: "TaskOtherProject", url: taskURL, token: tokenA, want: 403},
		{name: "TaskOtherProjectQuery", url: taskURL, token: tokenA, query: true, want: 403},
		{name: "TaskUnknown", url: "/v1/tasks/" + uuid.NewString() + "/events", token: tokenA, want: 403},
		{name: "ProjectNoToken", url: projectURL, want: 401},
		{name: "ProjectExpired", url: projectURL, token: expired, want: 401},
		{name: "ProjectOther", url: projectURL, token: tokenA, want: 403},
		{name: "ProjectOtherQuery", url: projectURL, token: tokenA, query: true, want: 403},
		{name: "SubmitOther", method: "POST", url: submitURL, token: tokenA, want: 403},
		{name: "SubmitNoToken", method: "POST", url: submitURL, want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, tok := tt.url, tt.token
			if tt.query {
				url, tok = url+"?access_token="+tt.token, ""
			}
			method := tt.method
			if method == "" {
				method = "GET"
			}
			rp := e.call(t, method, url, tok, `{"type":"build","prompt":"x"}`, nil)
			if rp.status != tt.want {
				t.Fatalf("status %d, want %d (%s)", rp.status, tt.want, rp.body)
			}
			// The body never says why (no token, which project).
			wantBody := map[int]string{401: `{"error":{"code":"UNAUTHORIZED","message":"unauthorized"}}`,
				403: `{"error":{"code":"FORBIDDEN","message":"forbidden"}}`}[tt.want]
			if strings.TrimSpace(string(rp.body)) != wantBody {
				t.Errorf("body %s, want %s", rp.body, wantBody)
			}
			errorCode(t, rp)
		})
	}
}

func TestCreateTask(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	submit := "/v1/projects/" + projectID.String() + "/tasks"
	for _, tt := range []struct{ name, body string }{
		{"NotJSON", `{`},
		{"UnknownField", `{"type":"chat","mode":"x"}`},
		{"BadType", `{"type":"deploy","prompt":"x"}`},
	} {
		if rp := e.call(t, "POST", submit, tok, tt.body, nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
			t.Errorf("%s: %d %s", tt.name, rp.status, rp.body)
		}
	}

	rp := e.call(t, "POST", submit, tok, `{"type":"chat","prompt":"hello","input":{"k":1}}`, nil)
	var task api.TaskView
	if err := json.Unmarshal(rp.body, &task); err != nil || rp.status != http.StatusCreated {
		t.Fatalf("submit: %d %s (%v)", rp.status, rp.body, err)
	}
	if task.ProjectID != projectID || task.Type != "chat" || task.Status != "queued" || task.Prompt != "hello" {
		t.Errorf("task = %+v", task)
	}
	if loc := rp.header.Get("Location"); loc != "/v1/tasks/"+task.ID.String()+"/events" {
		t.Errorf("Location %q", loc)
	}
	// Its events stream with the same token, in the query as EventSource sends it.
	if _, err := events.NewRecorder(e.pool, task.ID, projectID).Emit(t.Context(), events.Log{Level: "info", Message: "x"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var got sse.Message
	_, err := (&sse.Client{}).Stream(ctx, e.srv.URL+"/v1/tasks/"+task.ID.String()+"/events?access_token="+tok, "", func(m sse.Message) error {
		got = m
		return io.EOF
	})
	if err != io.EOF || got.Event.TaskID != task.ID {
		t.Fatalf("stream: %v, event of task %s", err, got.Event.TaskID)
	}
}

// TestCreateTaskGraph: a task is created with its priority, parent and
// dependencies in one request; one the graph's rules refuse is a 400 with
// the rule's code, and nothing is created.
func TestCreateTaskGraph(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	submit := "/v1/projects/" + projectID.String() + "/tasks"
	create := func(body string) (api.TaskView, reply) {
		t.Helper()
		rp := e.call(t, "POST", submit, tok, body, nil)
		var task api.TaskView
		if rp.status == http.StatusCreated {
			if err := json.Unmarshal(rp.body, &task); err != nil {
				t.Fatal(err)
			}
		}
		return task, rp
	}
	head, rp := create(`{"type":"plan","prompt":"head"}`)
	if rp.status != http.StatusCreated || head.Priority != 2 {
		t.Fatalf("head: %d %s", rp.status, rp.body)
	}
	next, rp := create(`{"type":"chat","prompt":"next","priority":1,"parent_task_id":"` + head.ID.String() + `","depends_on":["` + head.ID.String() + `"]}`)
	if rp.status != http.StatusCreated || next.Status != "waiting" || next.Priority != 1 || next.ParentTaskID == nil || *next.ParentTaskID != head.ID {
		t.Fatalf("dependent: %d %s", rp.status, rp.body)
	}
	read := func(path string) api.TaskView {
		t.Helper()
		var v api.TaskView
		if rp := e.call(t, "GET", path, tok, "", nil); rp.status != http.StatusOK || json.Unmarshal(rp.body, &v) != nil {
			t.Fatalf("GET %s: %d %s", path, rp.status, rp.body)
		}
		return v
	}
	if v := read("/v1/tasks/" + head.ID.String()); len(v.Dependents) != 1 || v.Dependents[0] != next.ID || len(v.Children) != 1 || v.Children[0] != next.ID {
		t.Errorf("head's relations: dependents %v, children %v; want %s in both", v.Dependents, v.Children, next.ID)
	}
	if v := read("/v1/tasks/" + next.ID.String()); len(v.DependsOn) != 1 || v.DependsOn[0] != head.ID {
		t.Errorf("dependent's depends_on %v, want %s", v.DependsOn, head.ID)
	}
	var children api.TaskList
	if rp := e.call(t, "GET", submit+"?parent="+head.ID.String(), tok, "", nil); rp.status != http.StatusOK || json.Unmarshal(rp.body, &children) != nil ||
		len(children.Tasks) != 1 || children.Tasks[0].ID != next.ID || children.Tasks[0].DependsOn[0] != head.ID {
		t.Errorf("?parent=: %d %s", rp.status, rp.body)
	}
	for _, tt := range []struct{ name, body, code string }{
		{"MissingDependency", `{"type":"chat","prompt":"x","depends_on":["` + uuid.NewString() + `"]}`, "INVALID_TASK_DEPENDENCY"},
		{"MissingAgent", `{"type":"chat","prompt":"x","agent_id":"` + uuid.NewString() + `"}`, "INVALID_ASSIGNEE"},
		{"ParentOfAnotherProject", `{"type":"chat","prompt":"x","parent_task_id":"` + uuid.NewString() + `"}`, "INVALID_PARENT_TASK"},
		{"Priority", `{"type":"chat","prompt":"x","priority":9}`, api.CodeValidation},
	} {
		if _, rp := create(tt.body); rp.status != http.StatusBadRequest || errorCode(t, rp) != tt.code {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, rp.status, rp.body, tt.code)
		}
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1`, projectID).Scan(&n); err != nil || n != 2 {
		t.Errorf("the project holds %d tasks (%v), want the 2 created", n, err)
	}
}

// TestStreamRefusals: a malformed cursor is refused in the error body.
func TestStreamRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	task := e.newTask(t, projectID)
	tok := e.token(t, "", "", projectID)
	for _, path := range []string{
		"/v1/tasks/" + task.ID.String() + "/events?after=x",
		"/v1/tasks/" + task.ID.String() + "/events?after=-1",
		"/v1/projects/" + projectID.String() + "/events?after=1-x",
		"/v1/projects/" + projectID.String() + "/events?after=999999", // no such event
	} {
		if rp := e.call(t, "GET", path, tok, "", nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
			t.Errorf("%s: %d %s", path, rp.status, rp.body)
		}
	}
}

// TestStreamEndsWhenTokenExpires: a stream closes when its token's exp
// passes, after a final "expired" event, and not before.
func TestStreamEndsWhenTokenExpires(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	task := e.newTask(t, projectID)
	for name, path := range map[string]string{
		"Task":    "/v1/tasks/" + task.ID.String() + "/events",
		"Project": "/v1/projects/" + projectID.String() + "/events",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exp := jwt.NewNumericDate(time.Now().Add(2 * time.Second)).Time // exp has whole seconds
			tok := e.tokenUntil(t, exp, "", "", projectID)
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body) // until the server closes the stream
			ended := time.Now()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("stream: %d, %v (%s)", resp.StatusCode, err, body)
			}
			if !strings.HasSuffix(string(body), "event: expired\ndata: {\"message\":\"token expired\"}\n\n") {
				t.Errorf("stream ended without the expired event: %q", body)
			}
			if ended.Before(exp) || ended.After(exp.Add(3*time.Second)) {
				t.Errorf("stream ended at %s, token expired at %s", ended.Format(time.StampMilli), exp.Format(time.StampMilli))
			}
			// Coming back with the same token is refused.
			if rp := e.call(t, "GET", path, tok, "", nil); rp.status != http.StatusUnauthorized {
				t.Errorf("reconnect with the expired token: %d", rp.status)
			}
		})
	}
}

// TestRevokedTokens: an operator's revocation of a project refuses its
// tokens issued before it (and those without iat), on every route, streams
// included; tokens of other projects and tokens issued since still work.
// Revoking every token refuses service tokens too.
func TestRevokedTokens(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectA, projectB := uuid.New(), uuid.New()
	issued := func(iat *jwt.NumericDate, role string, projects ...uuid.UUID) string {
		return e.sign(t, auth.Claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{IssuedAt: iat, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}, projects...)
	}
	before := jwt.NewNumericDate(time.Now().Add(-time.Minute))
	oldA, oldB := issued(before, "authenticated", projectA), issued(before, "authenticated", projectB)
	noIatA, oldService := issued(nil, "authenticated", projectA), issued(before, auth.RoleService)
	status := func(tok string, project uuid.UUID) (int, int) {
		list := e.call(t, "GET", "/v1/projects/"+project.String()+"/tasks", tok, "", nil).status
		resp, err := http.Get(e.srv.URL + "/v1/projects/" + project.String() + "/events?access_token=" + tok)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // the answer's status is all this needs
		return list, resp.StatusCode
	}
	check := func(name, tok string, project uuid.UUID, want int) {
		t.Helper()
		if list, stream := status(tok, project); list != want || stream != want {
			t.Errorf("%s: list %d, stream %d, want %d", name, list, stream, want)
		}
	}
	check("OldA", oldA, projectA, http.StatusOK)
	check("NoIatA", noIatA, projectA, http.StatusOK)

	nb, err := agentsql.RevokeTokens(t.Context(), e.pool, []string{projectA.String()})
	if err != nil {
		t.Fatal(err)
	}
	check("OldA", oldA, projectA, http.StatusUnauthorized)
	check("NoIatA", noIatA, projectA, http.StatusUnauthorized)
	check("OldB", oldB, projectB, http.StatusOK)
	check("OldService", oldService, projectA, http.StatusOK)
	check("NewA", issued(jwt.NewNumericDate(nb), "authenticated", projectA), projectA, http.StatusOK)

	if _, err := agentsql.RevokeTokens(t.Context(), e.pool, []string{agentsql.AllTokens}); err != nil {
		t.Fatal(err)
	}
	check("OldServiceAll", oldService, projectB, http.StatusUnauthorized)
	check("OldBAll", oldB, projectB, http.StatusUnauthorized)
}

// TestStreamCaps: a token may hold MaxStreamsPerToken streams open and the
// process MaxStreams; past either the answer is 429 with Retry-After, and a
// closed stream frees its place.
func TestStreamCaps(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{maxStreams: 5, maxStreamsPerToken: 3})
	project := uuid.New()
	task := e.newTask(t, project)
	tokA, tokB, tokC := e.token(t, "a", "authenticated", project), e.token(t, "b", "authenticated", project), e.token(t, "c", "authenticated", project)
	open := func(tok string, taskStream bool) *http.Response {
		t.Helper()
		url := e.srv.URL + "/v1/projects/" + project.String() + "/events?access_token=" + tok
		if taskStream {
			url = e.srv.URL + "/v1/tasks/" + task.ID.String() + "/events"
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if taskStream {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	want := func(name string, resp *http.Response, status int) {
		t.Helper()
		if resp.StatusCode != status {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: status %d, want %d (%s)", name, resp.StatusCode, status, b)
		}
		if status == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", name)
		}
	}
	a1, a2 := open(tokA, false), open(tokA, true)
	want("A1", a1, http.StatusOK)
	want("A2", a2, http.StatusOK)
	want("A3", open(tokA, false), http.StatusOK)
	want("A4", open(tokA, true), http.StatusTooManyRequests) // the token's cap, task and project streams alike
	want("B1", open(tokB, false), http.StatusOK)
	want("B2", open(tokB, false), http.StatusOK)
	want("C1", open(tokC, false), http.StatusTooManyRequests) // the process's cap
	// The token's other routes are not capped.
	if rp := e.call(t, http.MethodGet, "/v1/projects/"+project.String()+"/tasks", tokA, "", nil); rp.status != http.StatusOK {
		t.Errorf("list tasks at the cap: %d", rp.status)
	}
	a1.Body.Close() // the server notices and frees A's place
	poll.Until(t, "a closed stream's place freed", 10*time.Second, func() bool {
		resp := open(tokC, false)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestStreamCapOneTokenManyEncodings: the trailing bits of a signature's
// last base64 character do not make one token several: past the token's
// cap, another encoding of the same token opens no stream.
func TestStreamCapOneTokenManyEncodings(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{maxStreamsPerToken: 2})
	project := uuid.New()
	tok := e.token(t, "a", "authenticated", project)
	open := func(tok string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/v1/projects/"+project.String()+"/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp.StatusCode
	}
	for i := range 2 {
		if status := open(tok); status != http.StatusOK {
			t.Fatalf("stream %d: %d", i, status)
		}
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	if last&3 != 0 {
		t.Fatalf("token %q does not end in a canonical base64 character", tok)
	}
	for low := 1; low <= 3; low++ {
		variant := tok[:len(tok)-1] + string(alphabet[last|low])
		if status := open(variant); status == http.StatusOK {
			t.Errorf("low bits %d: a stream past the token's cap of 2", low)
		}
	}
}

// TestRevocationEndsOpenStreams: revoking a project ends the streams its
// tokens hold open, task and project streams alike, with a final "revoked"
// event; revoking every token ends a service token's; a stream of another
// project stays open.
func TestRevocationEndsOpenStreams(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{revocationCheck: 50 * time.Millisecond})
	projectA, projectB := uuid.New(), uuid.New()
	task := e.newTask(t, projectA)
	issued := func(role string, projects ...uuid.UUID) string {
		return e.sign(t, auth.Claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
			IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}, projects...)
	}
	tokA, tokB, service := issued("authenticated", projectA), issued("authenticated", projectB), issued(auth.RoleService)
	type stream struct {
		cancel context.CancelFunc
		body   chan string // what the stream sent, once it ended
	}
	open := func(tok, path string) stream {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		s := stream{cancel: cancel, body: make(chan string, 1)}
		go func() {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			s.body <- string(b)
		}()
		return s
	}
	const revoked = "event: revoked\ndata: {\"message\":\"token revoked\"}\n\n"
	ended := func(name string, s stream) {
		t.Helper()
		select {
		case body := <-s.body:
			if !strings.HasSuffix(body, revoked) {
				t.Errorf("%s ended without the revoked event: %q", name, body)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s still open 10 s after its token was revoked", name)
		}
	}
	projectStream := open(tokA, "/v1/projects/"+projectA.String()+"/events")
	taskStream := open(tokA, "/v1/tasks/"+task.ID.String()+"/events")
	other := open(tokB, "/v1/projects/"+projectB.String()+"/events")
	serviceStream := open(service, "/v1/projects/"+projectB.String()+"/events")

	if _, err := agentsql.RevokeTokens(t.Context(), e.pool, []string{projectA.String()}); err != nil {
		t.Fatal(err)
	}
	ended("ProjectStream", projectStream)
	ended("TaskStream", taskStream)
	for name, s := range map[string]stream{"ServiceStream": serviceStream, "OtherProject": other} {
		select {
		case body := <-s.body:
			t.Errorf("%s ended on another project's revocation: %q", name, body)
		default:
		}
	}

	if _, err := agentsql.RevokeTokens(t.Context(), e.pool, []string{agentsql.AllTokens}); err != nil {
		t.Fatal(err)
	}
	ended("ServiceStream", serviceStream)
	ended("OtherProjectAll", other)
}
