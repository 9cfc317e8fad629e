package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
)

func TestRunSummaryEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	task := e.newTask(t, project)
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, started_at, rate_limit_wait_ms)
		VALUES ($1, 1, 'k', 'running', 7, now() - interval '2 seconds', 1200)`, task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE task_runs SET status = 'failed', error_code = 'llm_rate_limited', finished_at = started_at + interval '1.5 seconds' WHERE task_id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	path := "/v1/projects/" + project.String() + "/runs/summary"
	rp := e.call(t, http.MethodGet, path+"?days=7", e.token(t, "alice", "", project), "", nil)
	if rp.status != http.StatusOK {
		t.Fatalf("status %d: %s", rp.status, rp.body)
	}
	var s api.RunSummary
	if err := json.Unmarshal(rp.body, &s); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if s.DaysRequested != 7 || len(s.Groups) != 1 {
		t.Fatalf("summary = %s", rp.body)
	}
	if g := s.Groups[0]; g.Day != today || g.Status != "failed" || g.ErrorCode != "llm_rate_limited" || g.Runs != 1 || g.TokensIn != 7 || g.MaxMS != 1500 || g.RateLimitWaitMS != 1200 {
		t.Errorf("group = %+v", g)
	}
	for _, tt := range []struct {
		name, query, token string
		want               int
	}{
		{"OtherProject", "", e.token(t, "mallory", "", uuid.New()), http.StatusForbidden},
		{"BadDays", "?days=0", e.token(t, "alice", "", project), http.StatusBadRequest},
	} {
		if rp := e.call(t, http.MethodGet, path+tt.query, tt.token, "", nil); rp.status != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, rp.status, tt.want)
		}
	}
}
