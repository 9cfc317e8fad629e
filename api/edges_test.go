package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/testing/s3test"
)

// TestLogsLevelChecked: a level the logs route does not know is refused
// (400 naming it), not answered with an empty page.
func TestLogsLevelChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	path := "/v1/projects/" + project.String() + "/logs?level="
	for _, tt := range []struct {
		level string
		want  int
	}{{"nope", http.StatusBadRequest}, {"WARN", http.StatusBadRequest}, {"debug", http.StatusOK}, {"info", http.StatusOK},
		{"warn", http.StatusOK}, {"error", http.StatusOK}, {"", http.StatusOK}} {
		rp := e.call(t, http.MethodGet, path+tt.level, tok, "", nil)
		if rp.status != tt.want || (tt.want == http.StatusBadRequest && !strings.Contains(string(rp.body), `level \"`+tt.level+`\"`)) {
			t.Errorf("level %q: %d %s, want %d", tt.level, rp.status, rp.body, tt.want)
		}
	}
}

// TestRunSummaryRetries: only a run after one that failed (or was
// cancelled, or lost) is a retry; a review's revision and its approve,
// and a run after a pause, are not.
func TestRunSummaryRetries(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	runs := func(statuses ...string) {
		t.Helper()
		task := e.newTask(t, project)
		for i, s := range statuses {
			status, code, _ := strings.Cut(s, ":")
			// A run starts running, then ends.
			if _, err := e.pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, started_at)
				VALUES ($1, $2, $3, now())`, task.ID, i+1, uuid.NewString()); err != nil {
				t.Fatal(err)
			}
			if _, err := e.pool.Exec(t.Context(), `UPDATE task_runs SET status = $3, error_code = nullif($4, ''), finished_at = now()
				WHERE task_id = $1 AND attempt = $2`, task.ID, i+1, status, code); err != nil {
				t.Fatal(err)
			}
		}
	}
	runs("succeeded", "succeeded", "succeeded")                // review, revision after a reject, approve: no retry
	runs("interrupted:paused", "succeeded")                    // paused, resumed: no retry
	runs("failed:llm_error", "interrupted:lease", "succeeded") // failed, retried and lost, retried: two
	var s api.RunSummary
	e.get(t, "/v1/projects/"+project.String()+"/runs/summary", e.token(t, "alice", "", project), &s)
	var retries, total int64
	for _, g := range s.Groups {
		retries += g.Retries
		total += g.Runs
	}
	if total != 8 || retries != 2 {
		b, _ := json.Marshal(s.Groups)
		t.Errorf("%d runs, %d retries; want 8 and 2: %s", total, retries, b)
	}
}

// TestDocsIndexSaysSkipped: the index refresh answers every count it
// documents, skipped included when it is 0.
func TestDocsIndexSaysSkipped(t *testing.T) {
	t.Parallel()
	store := s3test.NewStore(t)
	e := setup(t, envOpts{store: store})
	project := uuid.New()
	rp := e.call(t, http.MethodPost, "/v1/projects/"+project.String()+"/docs/index", e.token(t, "alice", "", project), "", nil)
	var got map[string]any
	if err := json.Unmarshal(rp.body, &got); err != nil || rp.status != http.StatusOK {
		t.Fatalf("%d %s (%v)", rp.status, rp.body, err)
	}
	for _, k := range []string{"documents", "read", "removed", "skipped"} {
		if _, ok := got[k]; !ok {
			t.Errorf("the answer %s lacks %q", rp.body, k)
		}
	}
}

// TestControlAnswerSaysFrom: a control's answer says the status the task
// moved from, applied or refused.
func TestControlAnswerSaysFrom(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	task := e.newTask(t, project)
	base := "/v1/tasks/" + task.ID.String()
	for _, tt := range []struct {
		action     string
		want       int
		from, then string
	}{
		{"pause", http.StatusOK, "queued", "paused"},
		{"resume", http.StatusOK, "paused", "queued"},
		{"cancel", http.StatusOK, "queued", "cancelled"},
		{"resume", http.StatusConflict, "", ""}, // refused: the error body
	} {
		rp := e.call(t, http.MethodPost, base+"/"+tt.action, tok, "", nil)
		var res struct{ From, Status string }
		if err := json.Unmarshal(rp.body, &res); err != nil || rp.status != tt.want || res.From != tt.from || res.Status != tt.then {
			t.Errorf("%s: %d %s, want %d from %q to %q", tt.action, rp.status, rp.body, tt.want, tt.from, tt.then)
		}
	}
}
