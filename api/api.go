// Package api serves the HTTP endpoints that steer tasks, and the inbox:
//
//	POST /v1/tasks/{id}/cancel
//	POST /v1/tasks/{id}/pause
//	POST /v1/tasks/{id}/resume
//	POST /v1/tasks/{id}/retry
//	POST /v1/tasks/{id}/answer    {"answer": "…"} (required)
//	GET  /v1/projects/{project_id}/inbox[?all=true&limit=n]
//	POST /v1/inbox/{id}/close     (items that need no answer)
//
// Each takes an optional JSON body {"expected_version": n} and a bearer token
// (package auth) that must cover the task's project. They call the same SQL
// function apps reach through PostgREST, agentworker_control_task, so the
// state machine, the version check and the audit event are one
// implementation.
package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Error codes of the error body {"error": {"code", "message"}}.
const (
	CodeValidation      = "VALIDATION_ERROR"
	CodeTaskNotFound    = "TASK_NOT_FOUND"
	CodeVersionConflict = "TASK_VERSION_CONFLICT"
	CodeIllegal         = "ILLEGAL_TRANSITION"
	CodeInternal        = "INTERNAL_ERROR"
	CodeNotFound        = "NOT_FOUND"
	CodeAnswerRequired  = "ANSWER_REQUIRED"
)

// maxBody bounds a request body; an answer is text a person typed.
const maxBody = 64 << 10

// API is the task steering endpoints.
type API struct {
	pool     *pgxpool.Pool
	verifier *auth.Verifier
	logger   *slog.Logger
}

// New returns the endpoints. logger defaults to discarding.
func New(pool *pgxpool.Pool, verifier *auth.Verifier, logger *slog.Logger) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &API{pool: pool, verifier: verifier, logger: logger}
}

// Register adds the endpoints to mux.
func (a *API) Register(mux *http.ServeMux) {
	for _, action := range agentsql.Actions {
		mux.HandleFunc("POST /v1/tasks/{id}/"+string(action), a.control(action))
	}
	mux.HandleFunc("GET /v1/projects/{project_id}/inbox", a.listInbox)
	mux.HandleFunc("POST /v1/inbox/{id}/close", a.closeInbox)
}

type request struct {
	ExpectedVersion *int   `json:"expected_version"`
	Answer          string `json:"answer"`
}

func (a *API) control(action agentsql.Action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		claims, err := a.verifier.FromRequest(r)
		if err != nil {
			auth.WriteError(w, err)
			return
		}
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeValidation, "task id is not a uuid")
			return
		}
		var req request
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		switch {
		case err != nil:
			writeError(w, http.StatusBadRequest, CodeValidation, "could not read the request body")
			return
		case len(body) > maxBody:
			writeError(w, http.StatusRequestEntityTooLarge, CodeValidation, "request body too large")
			return
		case len(body) > 0:
			if err := json.Unmarshal(body, &req); err != nil {
				writeError(w, http.StatusBadRequest, CodeValidation, "request body is not valid JSON: "+err.Error())
				return
			}
		}
		task, err := agentsql.GetTask(ctx, a.pool, id)
		if errors.Is(err, agentsql.ErrTaskNotFound) {
			writeError(w, http.StatusNotFound, CodeTaskNotFound, "task not found")
			return
		}
		if err != nil {
			a.internal(w, r, err)
			return
		}
		if !claims.CanAccess(task.ProjectID.String()) {
			auth.WriteError(w, auth.ErrForbidden)
			return
		}
		res, err := agentsql.ControlTask(ctx, a.pool, id, action, agentsql.ControlOpts{
			ExpectedVersion: req.ExpectedVersion, Actor: actor(claims), Answer: req.Answer})
		var ce *agentsql.ControlError
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, res)
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrVersionConflict):
			writeError(w, http.StatusConflict, CodeVersionConflict, ce.Result.Error)
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrIllegalTransition):
			writeError(w, http.StatusConflict, CodeIllegal, ce.Result.Error)
		case errors.As(err, &ce) && errors.Is(err, agentsql.ErrInvalidAction):
			writeError(w, http.StatusBadRequest, CodeValidation, ce.Result.Error)
		case errors.Is(err, agentsql.ErrTaskNotFound):
			writeError(w, http.StatusNotFound, CodeTaskNotFound, "task not found")
		default:
			a.internal(w, r, err)
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

func (a *API) internal(w http.ResponseWriter, r *http.Request, err error) {
	a.logger.ErrorContext(r.Context(), "task control request failed", slog.String("path", r.URL.Path), slog.String("err", err.Error()))
	writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError answers with the error body; the message is redacted, as every
// HTTP error body is.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, redact.String(msg)
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
