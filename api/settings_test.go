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
	task := spentTask(t, e, projectID, 1)
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO inbox_items (project_id, task_id, kind, reason, title)
		SELECT project_id, id, 'await_user_input', 'budget_exceeded', 'capped' FROM ai_tasks WHERE id = $1`, task); err != nil {
		t.Fatal(err)
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
		{"Missing", `{}`},
	} {
		if rp := e.call(t, "PATCH", path, tok, tt.body, nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, rp.status, rp.body, api.CodeValidation)
		}
	}
	// Still under the spend: nothing resumes.
	if s = read(e.call(t, "PATCH", path, tok, `{"max_cost_usd_per_day": 0.75}`, nil)); *s.CapUSD != 0.75 || len(s.Resumed) != 0 || status() != "paused" {
		t.Fatalf("cap 0.75: %+v, task %s", s, status())
	}
	// Another project's token may neither read nor set it.
	other := e.token(t, "", "authenticated", uuid.New())
	for _, m := range []string{"GET", "PATCH"} {
		if rp := e.call(t, m, path, other, `{"max_cost_usd_per_day": 100}`, nil); rp.status != http.StatusForbidden {
			t.Errorf("%s with another project's token: %d %s", m, rp.status, rp.body)
		}
	}
	// Raised above the spend: the task resumes.
	if s = read(e.call(t, "PATCH", path, tok, `{"max_cost_usd_per_day": 2}`, nil)); *s.CapUSD != 2 || !slices.Equal(s.Resumed, []uuid.UUID{task}) {
		t.Fatalf("cap 2: %+v", s)
	}
	if st := status(); st != "queued" {
		t.Errorf("task %s after the cap was raised, want queued", st)
	}
	// Unset: the default holds again.
	if s = read(e.call(t, "PATCH", path, tok, `{"max_cost_usd_per_day": null}`, nil)); s.MaxCostUSDPerDay != nil || *s.CapUSD != 0.5 {
		t.Fatalf("unset: %+v", s)
	}
}

// TestTaskReadShowsTreeSpend: GET /v1/tasks/{id} answers the spend of the
// task's tree (its root and every descendant) beside the task's own, and
// a descendant deleted by retention still counts.
func TestTaskReadShowsTreeSpend(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	insert := func(parent *uuid.UUID, cost float64) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		if err := e.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status, parent_task_id) VALUES ($1, 'chat', 'x', 'paused', $2) RETURNING id`,
			projectID, parent).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(t.Context(), `UPDATE ai_tasks SET cost = $2, tokens_in = 100, tokens_out = 10 WHERE id = $1`, id, cost); err != nil {
			t.Fatal(err)
		}
		return id
	}
	root := insert(nil, 1)
	child := insert(&root, 2)
	grandchild := insert(&child, 4)
	read := func(id uuid.UUID) api.TaskView {
		t.Helper()
		rp := e.call(t, "GET", "/v1/tasks/"+id.String(), tok, "", nil)
		var v api.TaskView
		if rp.status != http.StatusOK || json.Unmarshal(rp.body, &v) != nil || v.Tree == nil {
			t.Fatalf("read task %s: %d %s", id, rp.status, rp.body)
		}
		return v
	}
	v := read(grandchild)
	if v.CostUSD != 4 || v.Tree.RootTaskID != root || v.Tree.Tasks != 3 || v.Tree.CostUSD != 7 || v.Tree.TokensIn != 300 || v.Tree.TokensOut != 30 {
		t.Fatalf("grandchild: own $%v, tree %+v; want $4 and a tree of 3 tasks, $7, rooted at %s", v.CostUSD, *v.Tree, root)
	}
	if _, err := e.pool.Exec(t.Context(), `DELETE FROM ai_tasks WHERE id = $1`, child); err != nil {
		t.Fatal(err)
	}
	if v = read(root); v.CostUSD != 1 || v.Tree.Tasks != 3 || v.Tree.CostUSD != 7 {
		t.Fatalf("root after its child was deleted: own $%v, tree %+v; want $1 and the tree's $7", v.CostUSD, *v.Tree)
	}
}

// TestProjectSettingsSpendWithoutCap: a project without a cap (neither its
// own nor the operator's) still shows what it spent today.
func TestProjectSettingsSpendWithoutCap(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	spentTask(t, e, projectID, 1.25)
	rp := e.call(t, "GET", "/v1/projects/"+projectID.String()+"/settings", tok, "", nil)
	var s api.ProjectSettings
	if err := json.Unmarshal(rp.body, &s); rp.status != http.StatusOK || err != nil {
		t.Fatalf("GET settings: %d %s (%v)", rp.status, rp.body, err)
	}
	if s.CapUSD != nil || s.SpentTodayUSD != 1.25 {
		t.Errorf("settings %+v, want no cap and 1.25 spent today", s)
	}
}

// spentTask inserts a paused chat task of project that spent cost today.
func spentTask(t *testing.T, e *env, project uuid.UUID, cost float64) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := e.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', 'paused') RETURNING id`,
		project).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE ai_tasks SET cost = $2 WHERE id = $1`, id, cost); err != nil {
		t.Fatal(err)
	}
	return id
}
