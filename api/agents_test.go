package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
)

// TestAgentEndpoints: an agent is created, read, listed, updated and
// deleted through /v1 with its version; stale versions, duplicate names,
// unknown tools and an agent with unfinished tasks are refused, and another
// project's agent is not visible.
func TestAgentEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	agents := "/v1/projects/" + projectID.String() + "/agents"
	decode := func(rp reply, want int) agentsql.Agent {
		t.Helper()
		var a agentsql.Agent
		if rp.status != want {
			t.Fatalf("status %d, want %d: %s", rp.status, want, rp.body)
		}
		if err := json.Unmarshal(rp.body, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}

	coder := decode(e.call(t, "POST", agents, tok, `{"name":"coder","role":"writes code","persona":"You are terse.","tools":["read_file","write_file"]}`, nil), http.StatusCreated)
	if coder.Name != "coder" || coder.Status != "enabled" || coder.Version != 1 || len(coder.Tools) != 2 || coder.ProjectID != projectID || coder.Review {
		t.Fatalf("created %+v", coder)
	}
	if got := decode(e.call(t, "GET", "/v1/agents/"+coder.ID.String(), tok, "", nil), http.StatusOK); got.Persona != "You are terse." {
		t.Errorf("read %+v", got)
	}
	var list api.AgentList
	if rp := e.call(t, "GET", agents, tok, "", nil); rp.status != http.StatusOK || json.Unmarshal(rp.body, &list) != nil || len(list.Agents) != 1 {
		t.Errorf("list: %d %s", rp.status, rp.body)
	}

	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"NoName", "POST", agents, `{"role":"x"}`, http.StatusBadRequest, api.CodeValidation},
		{"NameTaken", "POST", agents, `{"name":"coder"}`, http.StatusConflict, "AGENT_NAME_TAKEN"},
		{"UnknownTool", "POST", agents, `{"name":"x","tools":["rm_rf"]}`, http.StatusBadRequest, api.CodeValidation},
		{"BadStatus", "POST", agents, `{"name":"x","status":"asleep"}`, http.StatusBadRequest, api.CodeValidation},
		{"NoVersion", "PATCH", "/v1/agents/" + coder.ID.String(), `{"role":"x"}`, http.StatusBadRequest, api.CodeValidation},
		{"StaleVersion", "PATCH", "/v1/agents/" + coder.ID.String(), `{"role":"x","expected_version":7}`, http.StatusConflict, api.CodeAgentConflict},
		{"StaleDelete", "DELETE", "/v1/agents/" + coder.ID.String() + "?expected_version=7", "", http.StatusConflict, api.CodeAgentConflict},
	} {
		if rp := e.call(t, tt.method, tt.path, tok, tt.body, nil); rp.status != tt.status || errorCode(t, rp) != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, rp.status, rp.body, tt.status, tt.code)
		}
	}

	coder = decode(e.call(t, "PATCH", "/v1/agents/"+coder.ID.String(), tok, `{"model":"gpt-4o-mini","tools":null,"review":true,"expected_version":1}`, nil), http.StatusOK)
	if coder.Version != 2 || coder.Model != "gpt-4o-mini" || coder.Tools != nil || coder.Persona != "You are terse." || !coder.Review {
		t.Errorf("updated %+v", coder)
	}
	// Read back, the setting stays.
	if got := decode(e.call(t, "GET", "/v1/agents/"+coder.ID.String(), tok, "", nil), http.StatusOK); !got.Review {
		t.Errorf("read after setting review: %+v", got)
	}
	if rp := e.call(t, "POST", agents, tok, `{"name":"x","review":"yes"}`, nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
		t.Errorf("review not a boolean: %d %s", rp.status, rp.body)
	}

	// Another project's token sees nothing of it.
	other := e.token(t, "", "authenticated", uuid.New())
	if rp := e.call(t, "GET", "/v1/agents/"+coder.ID.String(), other, "", nil); rp.status != http.StatusForbidden {
		t.Errorf("another project's token read the agent: %d %s", rp.status, rp.body)
	}

	// An agent with an unfinished task stays; a task may name it.
	rp := e.call(t, "POST", "/v1/projects/"+projectID.String()+"/tasks", tok, fmt.Sprintf(`{"type":"chat","prompt":"x","agent_id":%q}`, coder.ID), nil)
	if rp.status != http.StatusCreated {
		t.Fatalf("task of the agent: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "DELETE", "/v1/agents/"+coder.ID.String()+"?expected_version=2", tok, "", nil); rp.status != http.StatusConflict || errorCode(t, rp) != "AGENT_HAS_TASKS" {
		t.Errorf("delete an agent with a queued task: %d %s", rp.status, rp.body)
	}
	idle := decode(e.call(t, "POST", agents, tok, `{"name":"idle"}`, nil), http.StatusCreated)
	if rp := e.call(t, "DELETE", "/v1/agents/"+idle.ID.String()+"?expected_version=1", tok, "", nil); rp.status != http.StatusNoContent {
		t.Errorf("delete an idle agent: %d %s", rp.status, rp.body)
	}
}

// TestUnpricedModelRefused: an agent may name only a model with a price
// (the built-in list, or one the operator adds, at 0 for a self-hosted
// model), on create and update; a task is refused when its agent (written
// by SQL, past the API) names a model without one: its usage would cost
// nothing and no cost budget would stop it.
func TestUnpricedModelRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{prices: llm.Prices{"self-hosted": {}}})
	projectID := uuid.New()
	tok := e.token(t, "", "authenticated", projectID)
	agents := "/v1/projects/" + projectID.String() + "/agents"
	// refused reports whether rp is MODEL_UNPRICED naming o1-pro and how
	// to price it.
	refused := func(rp reply) bool {
		t.Helper()
		var b struct {
			Error struct{ Code, Message string }
		}
		return rp.status == http.StatusBadRequest && json.Unmarshal(rp.body, &b) == nil && b.Error.Code == api.CodeModelUnpriced &&
			strings.Contains(b.Error.Message, `model "o1-pro" has no price`) && strings.Contains(b.Error.Message, "LLM_PRICES")
	}
	for _, tt := range []struct {
		name, method, body string
		status             int
	}{
		{"CreateUnpriced", "POST", `{"name":"a","model":"o1-pro"}`, http.StatusBadRequest},
		{"CreateListed", "POST", `{"name":"b","model":"gpt-4o"}`, http.StatusCreated},
		{"CreatePricedAtZero", "POST", `{"name":"c","model":"self-hosted"}`, http.StatusCreated},
		{"CreateWorkerModel", "POST", `{"name":"d"}`, http.StatusCreated},
	} {
		rp := e.call(t, tt.method, agents, tok, tt.body, nil)
		if rp.status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, rp.status, rp.body, tt.status)
		}
		if tt.status == http.StatusBadRequest && !refused(rp) {
			t.Errorf("%s: %s, want %s naming the model and LLM_PRICES", tt.name, rp.body, api.CodeModelUnpriced)
		}
	}
	var agent agentsql.Agent
	rp := e.call(t, "POST", agents, tok, `{"name":"e"}`, nil)
	if err := json.Unmarshal(rp.body, &agent); err != nil {
		t.Fatal(err)
	}
	if rp := e.call(t, "PATCH", "/v1/agents/"+agent.ID.String(), tok, `{"model":"o1-pro","expected_version":1}`, nil); !refused(rp) {
		t.Errorf("update to an unpriced model: %d %s", rp.status, rp.body)
	}

	// An agent written past the API: its tasks are refused at the API too.
	if _, err := e.pool.Exec(t.Context(), `UPDATE agents SET model = 'o1-pro' WHERE id = $1`, agent.ID); err != nil {
		t.Fatal(err)
	}
	tasks := "/v1/projects/" + projectID.String() + "/tasks"
	body := fmt.Sprintf(`{"type":"chat","prompt":"hi","agent_id":%q}`, agent.ID)
	if rp := e.call(t, "POST", tasks, tok, body, nil); !refused(rp) {
		t.Errorf("task of an agent with an unpriced model: %d %s", rp.status, rp.body)
	}
	if rp := e.call(t, "POST", tasks, tok, `{"type":"chat","prompt":"hi"}`, nil); rp.status != http.StatusCreated {
		t.Errorf("task without an agent: %d %s", rp.status, rp.body)
	}
}
