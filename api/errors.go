package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Error codes of the error body {"error": {"code", "message"}}.
const (
	CodeValidation       = "VALIDATION_ERROR"
	CodeUnauthorized     = "UNAUTHORIZED"
	CodeForbidden        = "FORBIDDEN"
	CodeNotFound         = "NOT_FOUND"
	CodeTaskNotFound     = "TASK_NOT_FOUND"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodeVersionConflict  = "TASK_VERSION_CONFLICT"
	CodeIllegal          = "ILLEGAL_TRANSITION"
	CodeAnswerRequired   = "ANSWER_REQUIRED"
	CodeInternal         = "INTERNAL_ERROR"
	CodeUnavailable      = "UNAVAILABLE"
	CodeSensitiveFile    = "SENSITIVE_FILE"
	CodeAgentConflict    = "AGENT_VERSION_CONFLICT"
	// CodeTooManyStreams: past a cap of open event streams (429).
	CodeTooManyStreams = "TOO_MANY_STREAMS"
	// CodeUnsupportedMediaType: a write whose body is not application/json.
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	// CodeModelUnpriced: an agent names, or a task's agent names, a model
	// with no price (LLM_PRICES) (400).
	CodeModelUnpriced = "MODEL_UNPRICED"
	// CodeInvalidToolPolicy: an agent's tool_policy or a task's
	// input.tool_policy is not a valid policy; the message names the rule.
	CodeInvalidToolPolicy = "INVALID_TOOL_POLICY"
	// CodeToolCallNotFound: the task has no call of that id waiting or
	// answered.
	CodeToolCallNotFound = "TOOL_CALL_NOT_FOUND"
)

// apiError is a refusal with its status, code and message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func validation(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, CodeValidation, fmt.Sprintf(format, args...)}
}

var errUnavailable = &apiError{http.StatusServiceUnavailable, CodeUnavailable, "auth is not configured (JWT_SECRET)"}

// notVisible answers the lookup of a task or inbox item that failed with
// err. A bearer limited to some projects gets 403 for a missing one, as for
// one of another project: whether an id exists is itself project data. A
// service bearer, who may see every project, learns it is missing.
func notVisible(claims auth.Claims, err error) error {
	switch {
	case !errors.Is(err, agentsql.ErrTaskNotFound) && !errors.Is(err, agentsql.ErrInboxItemNotFound) && !errors.Is(err, agentsql.ErrAgentNotFound):
		return err
	case claims.Role != auth.RoleService:
		return auth.ErrForbidden
	case errors.Is(err, agentsql.ErrTaskNotFound):
		return &apiError{http.StatusNotFound, CodeTaskNotFound, "task not found"}
	case errors.Is(err, agentsql.ErrAgentNotFound):
		return &apiError{http.StatusNotFound, CodeNotFound, "agent not found"}
	default:
		return &apiError{http.StatusNotFound, CodeNotFound, "inbox item not found"}
	}
}

// fail answers err with the error body: a refusal as it says, an auth
// failure as a bare 401 or 403 (never why, nor which project), anything
// else as a logged 500.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	// A refusal never waits for the rest of a body: net/http would read up
	// to 256 kB of it, before answering and again before closing, as slowly
	// as the client sends it. The answer goes out at once, then the
	// connection's reads end.
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		defer func() {
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			_ = rc.SetReadDeadline(time.Now())
		}()
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, auth.ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentworker"`)
		ae = &apiError{http.StatusUnauthorized, CodeUnauthorized, "unauthorized"}
	case errors.Is(err, auth.ErrForbidden):
		ae = &apiError{http.StatusForbidden, CodeForbidden, "forbidden"}
	case errors.Is(err, sse.ErrBadCursor):
		ae = &apiError{http.StatusBadRequest, CodeValidation, "invalid cursor"}
	case errors.Is(err, sse.ErrBadLimit):
		ae = &apiError{http.StatusBadRequest, CodeValidation, "invalid limit"}
	default:
		if r.Context().Err() == nil {
			a.cfg.Logger.ErrorContext(r.Context(), "api request failed", slog.String("path", bounded(r.URL.Path)), slog.String("err", bounded(err.Error())))
		}
		ae = &apiError{http.StatusInternalServerError, CodeInternal, "internal error"}
	}
	writeError(w, ae.status, ae.code, ae.message)
}

// maxLogged bounds a value a request controls in a log line.
const maxLogged = 512

// bounded is s cut to maxLogged bytes, saying how long it was.
func bounded(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:maxLogged], ""), len(s))
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
