package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func TestControlEndpoints(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	verifier, err := auth.NewVerifier("0123456789abcdef-test-secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.New(pool, verifier, nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	projectID := uuid.New()
	token := func(projects ...string) string {
		s, err := verifier.Sign(auth.Claims{Projects: projects, RegisteredClaims: jwt.RegisteredClaims{
			Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	newTask := func() agentsql.Task {
		task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: projectID, Type: "build", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	post := func(path, tok, body string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	errCode := func(body map[string]any) any {
		e, _ := body["error"].(map[string]any)
		return e["code"]
	}

	task := newTask()
	good := token(projectID.String())
	tests := []struct {
		name     string
		path     string
		token    string
		body     string
		want     int
		wantCode string
	}{
		{"NoToken", "/v1/tasks/" + task.ID.String() + "/cancel", "", "", http.StatusUnauthorized, ""},
		{"OtherProject", "/v1/tasks/" + task.ID.String() + "/cancel", token(uuid.NewString()), "", http.StatusForbidden, ""},
		{"NotFound", "/v1/tasks/" + uuid.NewString() + "/cancel", good, "", http.StatusNotFound, api.CodeTaskNotFound},
		{"BadID", "/v1/tasks/nope/cancel", good, "", http.StatusBadRequest, api.CodeValidation},
		{"BadBody", "/v1/tasks/" + task.ID.String() + "/cancel", good, "{", http.StatusBadRequest, api.CodeValidation},
		{"StaleVersion", "/v1/tasks/" + task.ID.String() + "/pause", good, fmt.Sprintf(`{"expected_version": %d}`, task.Version+5), http.StatusConflict, api.CodeVersionConflict},
		{"Illegal", "/v1/tasks/" + task.ID.String() + "/resume", good, "", http.StatusConflict, api.CodeIllegal},
		{"AnswerRequired", "/v1/tasks/" + task.ID.String() + "/answer", good, `{}`, http.StatusBadRequest, api.CodeValidation},
		{"Pause", "/v1/tasks/" + task.ID.String() + "/pause", good, fmt.Sprintf(`{"expected_version": %d}`, task.Version), http.StatusOK, ""},
		{"Resume", "/v1/tasks/" + task.ID.String() + "/resume", good, "", http.StatusOK, ""},
		{"Cancel", "/v1/tasks/" + task.ID.String() + "/cancel", good, "", http.StatusOK, ""},
		{"CancelAgain", "/v1/tasks/" + task.ID.String() + "/cancel", good, "", http.StatusConflict, api.CodeIllegal},
		{"Retry", "/v1/tasks/" + task.ID.String() + "/retry", good, "", http.StatusOK, ""},
	}
	for _, tt := range tests { // in order: the steps share one task
		status, body := post(tt.path, tt.token, tt.body)
		if status != tt.want {
			t.Fatalf("%s: status %d, want %d (body %v)", tt.name, status, tt.want, body)
		}
		if tt.wantCode != "" && errCode(body) != tt.wantCode {
			t.Errorf("%s: error code %v, want %s (body %v)", tt.name, errCode(body), tt.wantCode, body)
		}
	}
	var actors []string
	rows, err := pool.Query(t.Context(), `SELECT payload -> 'metadata' ->> 'actor' FROM agent_events
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

func TestInboxEndpoints(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	verifier, err := auth.NewVerifier("0123456789abcdef-test-secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.New(pool, verifier, nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	projectID := uuid.New()
	tok, _ := verifier.Sign(auth.Claims{Projects: []string{projectID.String()}, RegisteredClaims: jwt.RegisteredClaims{
		Subject: "bob", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	other, _ := verifier.Sign(auth.Claims{Projects: []string{uuid.NewString()}, RegisteredClaims: jwt.RegisteredClaims{
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	do := func(method, path, token string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	done, _, err := agentsql.OpenInboxItem(t.Context(), pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxTaskCompleted, Reason: "completed", Title: "done"})
	if err != nil {
		t.Fatal(err)
	}
	question, _, err := agentsql.OpenInboxItem(t.Context(), pool, agentsql.InboxItem{ProjectID: projectID, Kind: agentsql.InboxAwaitUserInput, Title: "which db?"})
	if err != nil {
		t.Fatal(err)
	}
	list := "/v1/projects/" + projectID.String() + "/inbox"
	if st, _ := do("GET", list, other); st != http.StatusForbidden {
		t.Errorf("list with another project's token: %d", st)
	}
	if st, body := do("GET", list, tok); st != http.StatusOK || len(body["items"].([]any)) != 2 {
		t.Fatalf("list: %d %v", st, body)
	}
	if st, body := do("POST", "/v1/inbox/"+question.ID.String()+"/close", tok); st != http.StatusConflict {
		t.Errorf("closing a question without answering: %d %v", st, body)
	}
	if st, _ := do("POST", "/v1/inbox/"+done.ID.String()+"/close", other); st != http.StatusForbidden {
		t.Errorf("closing with another project's token: %d", st)
	}
	if st, body := do("POST", "/v1/inbox/"+done.ID.String()+"/close", tok); st != http.StatusOK || body["resolver"] != "user:bob" {
		t.Errorf("close: %d %v", st, body)
	}
	if st, _ := do("POST", "/v1/inbox/"+done.ID.String()+"/close", tok); st != http.StatusConflict {
		t.Errorf("closing twice: %d", st)
	}
	if st, body := do("GET", list, tok); st != http.StatusOK || len(body["items"].([]any)) != 1 {
		t.Errorf("open items after close: %d %v", st, body)
	}
}
