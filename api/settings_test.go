package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
)

// TestProjectSettings: the owner reads and sets its project's daily cap
// through /v1; a cap the project's spend of the day is now under resumes
// its tasks paused at the cap, and another project's token is refused.
func TestProjectSettings(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{dayCap: 0.5})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	path := "/v1/projects/" + projectID.String() + "/settings"

	// A task that spent a dollar today and paused at the cap.
	var task uuid.UUID
	if err := e.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', 'paused') RETURNING id`,
		projectID).Scan(&task); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE ai_tasks SET cost = 1 WHERE id = $1`,
		`INSERT INTO inbox_items (project_id, task_id, kind, reason, title) SELECT project_id, id, 'await_user_input', 'budget_exceeded', 'capped' FROM ai_tasks WHERE id = $1`,
	} {
		if _, err := e.pool.Exec(t.Context(), q, task); err != nil {
			t.Fatal(err)
		}
	}
	read := func(rp reply) api.ProjectSettings {
		t.Helper()
		var s api.ProjectSettings
		if rp.status != http.StatusOK || json.Unmarshal(rp.body, &s) != nil {
			t.Fatalf("settings: %d %s", rp.status, rp.body)
		}
		return s
	}
	status := func() string {
		t.Helper()
		var st string
		if err := e.pool.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, task).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	s := read(e.call(t, "GET", path, tok, "", nil))
	if s.MaxCostUSDPerDay != nil || s.DefaultMaxCostUSDPerDay == nil || *s.DefaultMaxCostUSDPerDay != 0.5 ||
		s.CapUSD == nil || *s.CapUSD != 0.5 || s.SpentTodayUSD != 1 {
		t.Fatalf("initial settings %+v", s)
	}
	for _, tt := range []struct{ name, body string }{
		{"Negative", `{"max_cost_usd_per_day": -1}`},
		{"TooLarge", `{"max_cost_usd_per_day": 1e9}`},
		{"NotANumber", `{"max_cost_usd_per_day": "5"}`},
		{"UnknownField", `{"max_cost": 5}`},
	} {
		if rp := e.call(t, "PUT", path, tok, tt.body, nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, rp.status, rp.body, api.CodeValidation)
		}
	}
	// Still under the spend: nothing resumes.
	if s = read(e.call(t, "PUT", path, tok, `{"max_cost_usd_per_day": 0.75}`, nil)); *s.CapUSD != 0.75 || len(s.Resumed) != 0 || status() != "paused" {
		t.Fatalf("cap 0.75: %+v, task %s", s, status())
	}
	// Another project's token may neither read nor set it.
	other := e.token(t, "", "authenticated", uuid.New())
	for _, m := range []string{"GET", "PUT"} {
		if rp := e.call(t, m, path, other, `{"max_cost_usd_per_day": 100}`, nil); rp.status != http.StatusForbidden {
			t.Errorf("%s with another project's token: %d %s", m, rp.status, rp.body)
		}
	}
	// Raised above the spend: the task resumes.
	if s = read(e.call(t, "PUT", path, tok, `{"max_cost_usd_per_day": 2}`, nil)); *s.CapUSD != 2 || !slices.Equal(s.Resumed, []uuid.UUID{task}) {
		t.Fatalf("cap 2: %+v", s)
	}
	if st := status(); st != "queued" {
		t.Errorf("task %s after the cap was raised, want queued", st)
	}
	// Unset: the default holds again.
	if s = read(e.call(t, "PUT", path, tok, `{"max_cost_usd_per_day": null}`, nil)); s.MaxCostUSDPerDay != nil || *s.CapUSD != 0.5 {
		t.Fatalf("unset: %+v", s)
	}
}
