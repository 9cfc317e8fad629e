package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestCreateTaskInput: a task's input is refused at creation when its run
// would fail on it or ignore it, with a message naming the field; what a
// plan with expansion or a build for review needs is accepted.
func TestCreateTaskInput(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	path := "/v1/projects/" + project.String() + "/tasks"
	for _, tt := range []struct {
		name, body string
		want       int
		says       string
	}{
		{"PlanExpands", `{"type": "plan", "prompt": "p", "input": {"expand": true}}`, http.StatusCreated, ""},
		{"BuildForReview", `{"type": "build", "prompt": "p", "input": {"review": true, "budget": {"max_tokens": 1000, "max_cost_usd": 0.5, "max_iterations": 5}, "allowed_paths": ["src/**"]}}`, http.StatusCreated, ""},
		{"OtherKeysKept", `{"type": "build", "prompt": "p", "input": {"title": "a child"}}`, http.StatusCreated, ""},
		{"NotAnObject", `{"type": "build", "prompt": "p", "input": [1]}`, http.StatusBadRequest, "input must be a JSON object"},
		{"ExpandOnBuild", `{"type": "build", "prompt": "p", "input": {"expand": true}}`, http.StatusBadRequest, "input.expand applies to plan tasks"},
		{"ReviewOnChat", `{"type": "chat", "prompt": "p", "input": {"review": true}}`, http.StatusBadRequest, "input.review applies to build tasks"},
		{"ReviewNotBool", `{"type": "build", "prompt": "p", "input": {"review": "yes"}}`, http.StatusBadRequest, "input.review must be true or false"},
		{"NegativeBudget", `{"type": "build", "prompt": "p", "input": {"budget": {"max_tokens": -1}}}`, http.StatusBadRequest, "input.budget"},
		{"BudgetNotNumber", `{"type": "build", "prompt": "p", "input": {"budget": {"max_cost_usd": "1"}}}`, http.StatusBadRequest, "input.budget.max_cost_usd must be a number"},
		{"PathOutside", `{"type": "build", "prompt": "p", "input": {"allowed_paths": ["../etc"]}}`, http.StatusBadRequest, "input.allowed_paths"},
		{"PathsNotList", `{"type": "build", "prompt": "p", "input": {"allowed_paths": "src"}}`, http.StatusBadRequest, "input.allowed_paths must be a list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rp := e.call(t, http.MethodPost, path, tok, tt.body, nil)
			if rp.status != tt.want || !strings.Contains(string(rp.body), tt.says) {
				t.Errorf("answered %d %s, want %d saying %q", rp.status, rp.body, tt.want, tt.says)
			}
		})
	}
}
