package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/handlers"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/traceid"
	"github.com/agentworker/agentworker/tracing"
)

// TaskRequest is the body of POST /v1/projects/{id}/tasks.
type TaskRequest struct {
	Type   string          `json:"type"`
	Prompt string          `json:"prompt"`
	Input  json.RawMessage `json:"input,omitempty"`
	// AgentID names an enabled agent of the project to run the task as.
	AgentID *uuid.UUID `json:"agent_id,omitempty"`
	// Priority is 1 (most urgent) … 4; absent, 2.
	Priority int `json:"priority,omitempty"`
	// ParentTaskID names a task of the project this one is part of.
	ParentTaskID *uuid.UUID `json:"parent_task_id,omitempty"`
	// DependsOn lists tasks of the project that must succeed first.
	DependsOn []uuid.UUID `json:"depends_on,omitempty"`
}

const (
	// maxTaskBody bounds a task's prompt and input.
	maxTaskBody = 1 << 20
	// maxControlBody bounds a steering body; an answer is text a person typed.
	maxControlBody = 64 << 10
)

func (a *API) createTask(w http.ResponseWriter, r *http.Request) error {
	projectID := accessOf(r).id
	var req TaskRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTaskBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errTooLarge
		}
		return validation(`body must be {"type", "prompt", "input", "agent_id", "priority", "parent_task_id", "depends_on"}`)
	}
	if string(req.Input) == "null" {
		req.Input = nil
	}
	var bad *handlers.InputError
	if err := handlers.CheckTask(req.Type, req.Priority, req.Input); errors.As(err, &bad) {
		return validation("%s", bad.Message)
	}
	if req.AgentID != nil {
		// An agent written past the API may name a model with no price.
		agent, err := agentsql.GetAgent(r.Context(), a.pool, *req.AgentID)
		if err == nil && agent.ProjectID == projectID {
			if err := a.priced(&agent.Model); err != nil {
				return err
			}
		}
	}
	task, err := agentsql.InsertTask(r.Context(), a.pool, agentsql.NewTask{ProjectID: projectID, Type: agentsql.TaskType(req.Type),
		Prompt: req.Prompt, Input: req.Input, AgentID: req.AgentID, Priority: req.Priority, ParentTaskID: req.ParentTaskID, DependsOn: req.DependsOn,
		TraceID: traceid.From(r.Context()), TraceParent: tracing.SpanID(r.Context())})
	var rule *agentsql.RuleError
	if errors.As(err, &rule) {
		return &apiError{http.StatusBadRequest, rule.Code, rule.Message}
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tasks/"+task.ID.String()+"/events")
	writeJSON(w, http.StatusCreated, viewOf(task, 0))
	return nil
}

var errTooLarge = &apiError{http.StatusRequestEntityTooLarge, CodeValidation, "request body too large"}

type controlRequest struct {
	ExpectedVersion *int   `json:"expected_version"`
	Answer          string `json:"answer"`
	// Feedback is a reject's: the revision's next user message.
	Feedback string `json:"feedback"`
	// Children is a retry's: retry the children a cancel left cancelled too.
	Children bool `json:"children"`
	// Message is a tool call's denial: the model reads it as the call's result.
	Message string `json:"message"`
}

// control serves POST /v1/tasks/{id}/<action>.
func (a *API) control(action agentsql.Action) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		acc := accessOf(r)
		var req controlRequest
		if err := readSmallJSON(r, maxControlBody, &req); err != nil {
			return err
		}
		answer := req.Answer
		var callID string
		switch action {
		case agentsql.ActionReject:
			answer = req.Feedback
		case agentsql.ActionApproveCall, agentsql.ActionDenyCall:
			answer, callID = req.Message, r.PathValue("call_id")
		}
		if req.Children && action != agentsql.ActionRetry {
			return validation("children is for retry only")
		}
		if action == agentsql.ActionApprove {
			if err := a.checkApprovable(r, acc.task); err != nil {
				return err
			}
		}
		res, err := agentsql.ControlTask(r.Context(), a.pool, acc.id, action, agentsql.ControlOpts{
			ExpectedVersion: req.ExpectedVersion, Actor: actor(acc.claims), Answer: answer, Children: req.Children, ToolCallID: callID})
		var ce *agentsql.ControlError
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, res)
			return nil
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrVersionConflict):
			return &apiError{http.StatusConflict, CodeVersionConflict, ce.Result.Error}
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrIllegalTransition):
			return &apiError{http.StatusConflict, CodeIllegal, ce.Result.Error}
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrInvalidAction):
			return validation("%s", ce.Result.Error)
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrTaskNotFound) && callID != "":
			// The guard saw the task: what is missing is the call.
			return &apiError{http.StatusNotFound, CodeToolCallNotFound, ce.Result.Error}
		default: // a task deleted since the guard read it is answered as a missing one
			return notVisible(acc.claims, err)
		}
	}
}

// actor names the bearer for the audit event.
func actor(c auth.Claims) string {
	switch {
	case c.Subject != "":
		return "user:" + c.Subject
	case c.Role != "":
		return "role:" + c.Role
	}
	return "api"
}
