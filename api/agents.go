package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentworker/agentworker/handlers/tools"
	agentsql "github.com/agentworker/agentworker/sql"
)

// maxAgentBody bounds an agent's definition; a persona is a few paragraphs.
const maxAgentBody = 64 << 10

// AgentRequest is the body of POST /v1/projects/{id}/agents and PATCH
// /v1/agents/{id}: on create, name is required and an absent field takes
// its default; on update, an absent field is left as it is, and
// expected_version is required. "tools": null means every tool the task
// type allows. "review": true makes the builds the agent runs end in
// review, as input.review does. "tool_policy" is the agent's ordered rules
// deciding each tool call of its tasks (null: none, every call allowed).
type AgentRequest struct {
	Name            *string         `json:"name"`
	Role            *string         `json:"role"`
	Model           *string         `json:"model"`
	Persona         *string         `json:"persona"`
	Tools           json.RawMessage `json:"tools"`
	Status          *string         `json:"status"`
	Review          *bool           `json:"review"`
	ToolPolicy      json.RawMessage `json:"tool_policy"`
	ExpectedVersion *int            `json:"expected_version"`
}

// AgentList is the answer of GET /v1/projects/{id}/agents.
type AgentList struct {
	Agents []agentsql.Agent `json:"agents"`
}

func (a *API) listAgents(w http.ResponseWriter, r *http.Request) error {
	agents, err := agentsql.ListAgents(r.Context(), a.pool, accessOf(r).id)
	if err != nil {
		return err
	}
	if agents == nil {
		agents = []agentsql.Agent{}
	}
	writeJSON(w, http.StatusOK, AgentList{Agents: agents})
	return nil
}

func (a *API) getAgent(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, accessOf(r).agent)
	return nil
}

func (a *API) createAgent(w http.ResponseWriter, r *http.Request) error {
	req, f, err := readAgent(w, r)
	if err != nil {
		return err
	}
	if req.Name == nil {
		return validation("name is required")
	}
	if err := a.priced(req.Model); err != nil {
		return err
	}
	agent, err := agentsql.CreateAgent(r.Context(), a.pool, accessOf(r).id, f)
	if err != nil {
		return agentRefusal(err)
	}
	writeJSON(w, http.StatusCreated, agent)
	return nil
}

func (a *API) updateAgent(w http.ResponseWriter, r *http.Request) error {
	req, f, err := readAgent(w, r)
	if err != nil {
		return err
	}
	if req.ExpectedVersion == nil {
		return validation("expected_version is required")
	}
	if err := a.priced(req.Model); err != nil {
		return err
	}
	agent, err := agentsql.UpdateAgent(r.Context(), a.pool, accessOf(r).id, *req.ExpectedVersion, f)
	if err != nil {
		return agentRefusal(err)
	}
	writeJSON(w, http.StatusOK, agent)
	return nil
}

// deleteAgent serves DELETE /v1/agents/{id}?expected_version=N.
func (a *API) deleteAgent(w http.ResponseWriter, r *http.Request) error {
	version, err := strconv.Atoi(r.URL.Query().Get("expected_version"))
	if err != nil {
		return validation("expected_version (a query parameter) is required")
	}
	if err := agentsql.DeleteAgent(r.Context(), a.pool, accessOf(r).id, version); err != nil {
		return agentRefusal(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readAgent decodes and checks an agent's body.
func readAgent(w http.ResponseWriter, r *http.Request) (AgentRequest, agentsql.AgentFields, error) {
	var req AgentRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAgentBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, agentsql.AgentFields{}, &apiError{http.StatusRequestEntityTooLarge, CodeValidation, "request body too large"}
		}
		return req, agentsql.AgentFields{}, validation(`body must be {"name", "role", "model", "persona", "tools", "status", "review", "tool_policy", "expected_version"}`)
	}
	f := agentsql.AgentFields{Name: req.Name, Role: req.Role, Model: req.Model, Persona: req.Persona, Status: req.Status, Review: req.Review}
	if req.Name != nil && (strings.TrimSpace(*req.Name) == "" || len(*req.Name) > 100) {
		return req, f, validation("name must be 1 to 100 characters, not blank")
	}
	if req.Status != nil && *req.Status != "enabled" && *req.Status != "disabled" {
		return req, f, validation("status must be enabled or disabled")
	}
	if len(req.ToolPolicy) > 0 {
		if _, err := tools.ParseCallPolicy(req.ToolPolicy); err != nil {
			return req, f, &apiError{http.StatusBadRequest, CodeInvalidToolPolicy, err.Error()}
		}
		f.ToolPolicy = req.ToolPolicy
	}
	if len(req.Tools) > 0 {
		f.SetTools = true
		if string(req.Tools) != "null" {
			if err := json.Unmarshal(req.Tools, &f.Tools); err != nil {
				return req, f, validation("tools must be a list of tool names, or null for every tool")
			}
			if f.Tools == nil {
				f.Tools = []string{}
			}
			all, err := tools.ForTaskType("build")
			if err != nil {
				return req, f, err
			}
			for _, name := range f.Tools {
				if !slices.Contains(all.Names(), name) {
					return req, f, validation("tools: %q is not a tool; the tools are %s", name, strings.Join(all.Names(), ", "))
				}
			}
		}
	}
	return req, f, nil
}

// agentRefusal answers the refusals of an agent's write.
func agentRefusal(err error) error {
	var rule *agentsql.RuleError
	switch {
	case errors.As(err, &rule) && rule.Code == CodeInvalidToolPolicy:
		return &apiError{http.StatusBadRequest, rule.Code, rule.Message}
	case errors.As(err, &rule):
		return &apiError{http.StatusConflict, rule.Code, rule.Message}
	case errors.Is(err, agentsql.ErrAgentVersionConflict):
		return &apiError{http.StatusConflict, CodeAgentConflict, err.Error()}
	case errors.Is(err, agentsql.ErrAgentNotFound):
		return &apiError{http.StatusNotFound, CodeNotFound, "agent not found"}
	}
	return err
}

// priced refuses a model with no price: its tasks would spend past every
// cost budget. Nil or empty names the worker's own model (LLM_MODEL), which
// the worker checks when it starts.
func (a *API) priced(model *string) error {
	if model == nil || *model == "" {
		return nil
	}
	if err := a.cfg.Prices.Check(*model); err != nil {
		return &apiError{http.StatusBadRequest, CodeModelUnpriced, err.Error()}
	}
	return nil
}
