// Package sse is the realtime gateway of agentworker: it streams the events
// of a task or of a whole project to browsers and other clients as
// Server-Sent Events, resumable with Last-Event-ID, behind the JWT auth of
// package auth. One Hub (one LISTEN connection) per process wakes every
// stream; streams read the events themselves from their cursor, so a client
// never skips or repeats one.
//
// Routes (Register):
//
//	GET  /v1/tasks/{id}/events      a task's events; the SSE id is the event's seq
//	GET  /v1/projects/{id}/events   a project's events; the SSE id is an opaque cursor
//	POST /v1/projects/{id}/tasks    create a task: {"type", "prompt", "input"}
//
// A stream starts after the cursor in the Last-Event-ID header, else in the
// last_event_id or after query parameter, else at the beginning.
package sse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Config configures a Server.
type Config struct {
	// Verifier checks tokens. When nil, every /v1 route answers 503: the
	// gateway is not configured (JWT_SECRET unset).
	Verifier *auth.Verifier
	// AllowedOrigins lists the origins allowed by CORS ("*" for any). The
	// page served by the worker itself needs none. Defaults to none.
	AllowedOrigins []string
	// Heartbeat is the interval of comment lines that keep idle streams
	// (and proxies) alive. Defaults to 15 seconds.
	Heartbeat time.Duration
	// Recheck is how often a stream reads its events without a
	// notification, a backstop for a lost one. Defaults to 2 seconds.
	Recheck time.Duration
	// HeldRecheck is how often a project stream rereads while events of the
	// project wait for an older transaction to end. Defaults to 20 ms.
	HeldRecheck time.Duration
	// Batch is the most events read per query. Defaults to 500.
	Batch int
	// Logger defaults to slog.Default.
	Logger *slog.Logger
}

// Server serves the event streams and task submission.
type Server struct {
	pool *pgxpool.Pool
	hub  *Hub
	cfg  Config
}

// New returns a Server reading events from pool, woken by hub (whose Run
// the caller starts).
func New(pool *pgxpool.Pool, hub *Hub, cfg Config) *Server {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 2 * time.Second
	}
	if cfg.HeldRecheck <= 0 {
		cfg.HeldRecheck = 20 * time.Millisecond
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{pool: pool, hub: hub, cfg: cfg}
}

// Register adds the gateway's routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("GET /v1/tasks/{id}/events", s.guard(s.taskEvents))
	mux.Handle("GET /v1/projects/{id}/events", s.guard(s.projectEvents))
	mux.Handle("POST /v1/projects/{id}/tasks", s.guard(s.createTask))
	mux.Handle("OPTIONS /v1/", s.guard(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
}

// guard applies CORS and answers 503 when auth is not configured.
func (s *Server) guard(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && s.originAllowed(origin) {
			hd := w.Header()
			hd.Set("Access-Control-Allow-Origin", origin)
			hd.Add("Vary", "Origin")
			hd.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
			hd.Set("Access-Control-Max-Age", "600")
		}
		if r.Method == http.MethodOptions {
			h(w, r)
			return
		}
		if s.cfg.Verifier == nil {
			writeJSONError(w, http.StatusServiceUnavailable, "unavailable")
			return
		}
		h(w, r)
	})
}

func (s *Server) originAllowed(origin string) bool {
	return slices.Contains(s.cfg.AllowedOrigins, "*") || slices.Contains(s.cfg.AllowedOrigins, origin)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":%q}`+"\n", msg)
}

// pathID parses the {id} path value; a malformed one is answered 404, as an
// id that does not exist would be.
func pathID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeJSONError(w, http.StatusNotFound, "not found")
		return uuid.Nil, false
	}
	return id, true
}

// cursorParam is the resume cursor of a request: the Last-Event-ID header
// (what EventSource sends on reconnect) wins over the query parameters.
func cursorParam(r *http.Request) string {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		return v
	}
	if v := r.URL.Query().Get("last_event_id"); v != "" {
		return v
	}
	return r.URL.Query().Get("after")
}

func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) {
	claims, err := s.cfg.Verifier.FromRequest(r)
	if err != nil {
		auth.WriteError(w, err)
		return
	}
	taskID, ok := pathID(w, r)
	if !ok {
		return
	}
	task, err := agentsql.GetTask(r.Context(), s.pool, taskID)
	switch {
	case errors.Is(err, agentsql.ErrTaskNotFound) && claims.Role != auth.RoleService:
		// Whether a task exists is itself project data.
		auth.WriteError(w, auth.ErrForbidden)
		return
	case errors.Is(err, agentsql.ErrTaskNotFound):
		writeJSONError(w, http.StatusNotFound, "not found")
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	if !claims.CanAccess(task.ProjectID.String()) {
		auth.WriteError(w, auth.ErrForbidden)
		return
	}
	after := 0
	if c := cursorParam(r); c != "" {
		if after, err = strconv.Atoi(c); err != nil || after < 0 {
			writeJSONError(w, http.StatusBadRequest, "invalid cursor")
			return
		}
	}
	sub := s.hub.SubscribeTask(taskID)
	defer sub.Close()
	s.stream(w, r, sub, func(ctx context.Context, write func(id string, ev events.Event) error) (bool, error) {
		for {
			rows, err := agentsql.TaskEventsAfter(ctx, s.pool, taskID, after, s.cfg.Batch)
			if err != nil {
				return false, err
			}
			for _, row := range rows {
				ev := events.FromRow(row)
				if err := write(strconv.Itoa(ev.Seq), ev); err != nil {
					return false, err
				}
				after = ev.Seq
			}
			if len(rows) < s.cfg.Batch {
				return false, nil
			}
		}
	})
}

// FormatProjectCursor renders a project stream's SSE id.
func FormatProjectCursor(c agentsql.ProjectCursor) string {
	return strconv.FormatInt(c.Xid, 10) + "-" + strconv.FormatInt(c.ID, 10)
}

// parseProjectCursor reads a cursor of FormatProjectCursor, or a plain
// event id (whose cursor is looked up).
func (s *Server) parseProjectCursor(ctx context.Context, projectID uuid.UUID, v string) (agentsql.ProjectCursor, error) {
	if xs, ids, ok := strings.Cut(v, "-"); ok {
		x, err1 := strconv.ParseInt(xs, 10, 64)
		id, err2 := strconv.ParseInt(ids, 10, 64)
		if err1 != nil || err2 != nil || x < 0 || id < 0 {
			return agentsql.ProjectCursor{}, errBadCursor
		}
		return agentsql.ProjectCursor{Xid: x, ID: id}, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 0 {
		return agentsql.ProjectCursor{}, errBadCursor
	}
	if id == 0 {
		return agentsql.ProjectCursor{}, nil
	}
	cur, err := agentsql.EventCursor(ctx, s.pool, projectID, id)
	if errors.Is(err, agentsql.ErrEventNotFound) {
		return cur, errBadCursor
	}
	return cur, err
}

var errBadCursor = errors.New("invalid cursor")

func (s *Server) projectEvents(w http.ResponseWriter, r *http.Request) {
	projectID, ok := pathID(w, r)
	if !ok {
		return
	}
	if _, err := s.cfg.Verifier.Authorize(r, projectID.String()); err != nil {
		auth.WriteError(w, err)
		return
	}
	var cur agentsql.ProjectCursor
	if c := cursorParam(r); c != "" {
		var err error
		if cur, err = s.parseProjectCursor(r.Context(), projectID, c); errors.Is(err, errBadCursor) {
			writeJSONError(w, http.StatusBadRequest, "invalid cursor")
			return
		} else if err != nil {
			s.internalError(w, r, err)
			return
		}
	}
	sub := s.hub.SubscribeProject(projectID)
	defer sub.Close()
	s.stream(w, r, sub, func(ctx context.Context, write func(id string, ev events.Event) error) (bool, error) {
		for {
			rows, held, err := agentsql.ProjectEventsAfter(ctx, s.pool, projectID, cur, s.cfg.Batch)
			if err != nil {
				return false, err
			}
			for _, row := range rows {
				if err := write(FormatProjectCursor(row.Cursor), events.FromRow(row.EventRow)); err != nil {
					return false, err
				}
				cur = row.Cursor
			}
			if len(rows) < s.cfg.Batch {
				return held, nil
			}
		}
	})
}

// catchUp writes the events after the stream's cursor and reports whether
// some are held back (to be reread soon).
type catchUp func(ctx context.Context, write func(id string, ev events.Event) error) (held bool, err error)

// stream runs one SSE response: headers, then catch-up on every wake-up,
// recheck or held-event timer, with heartbeats, until the client leaves,
// the server shuts down (the request's context) or the hub stops.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *Subscription, catch catchUp) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives any server write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 1000\n: connected\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}

	var buf []byte
	write := func(id string, ev events.Event) error {
		data, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode event %d: %w", ev.ID, err)
		}
		buf = append(buf[:0], "id: "...)
		buf = append(buf, id...)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
		_, err = w.Write(buf)
		return err
	}
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	recheck := time.NewTimer(0)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.hub.Done():
			return
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			continue
		case <-sub.C():
		case <-recheck.C:
		}
		held, err := catch(ctx, write)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "sse stream ended", slog.String("path", r.URL.Path), slog.String("err", err.Error()))
			}
			return
		}
		if rc.Flush() != nil {
			return
		}
		next := s.cfg.Recheck
		if held {
			next = s.cfg.HeldRecheck
		}
		recheck.Reset(next)
	}
}

func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		s.cfg.Logger.ErrorContext(r.Context(), "sse gateway", slog.String("path", r.URL.Path), slog.String("err", err.Error()))
	}
	writeJSONError(w, http.StatusInternalServerError, "internal error")
}

// TaskRequest is the body of POST /v1/projects/{id}/tasks.
type TaskRequest struct {
	Type   string          `json:"type"`
	Prompt string          `json:"prompt"`
	Input  json.RawMessage `json:"input,omitempty"`
}

// TaskResponse is the task created by POST /v1/projects/{id}/tasks.
type TaskResponse struct {
	ID        uuid.UUID `json:"id"`
	ProjectID uuid.UUID `json:"project_id"`
	Type      string    `json:"type"`
	Status    string    `json:"status"`
	Prompt    string    `json:"prompt"`
	CreatedAt time.Time `json:"created_at"`
}

const maxTaskBody = 1 << 20

func (s *Server) createTask(w http.ResponseWriter, r *http.Request) {
	projectID, ok := pathID(w, r)
	if !ok {
		return
	}
	if _, err := s.cfg.Verifier.Authorize(r, projectID.String()); err != nil {
		auth.WriteError(w, err)
		return
	}
	var req TaskRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTaskBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "body must be {\"type\", \"prompt\", \"input\"}")
		return
	}
	switch req.Type {
	case "chat", "plan", "build":
	default:
		writeJSONError(w, http.StatusBadRequest, "type must be chat, plan or build")
		return
	}
	if string(req.Input) == "null" {
		req.Input = nil
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		writeJSONError(w, http.StatusBadRequest, "input must be JSON")
		return
	}
	task, err := agentsql.InsertTask(r.Context(), s.pool, agentsql.NewTask{ProjectID: projectID, Type: agentsql.TaskType(req.Type), Prompt: req.Prompt, Input: req.Input})
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/tasks/"+task.ID.String()+"/events")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(TaskResponse{ID: task.ID, ProjectID: task.ProjectID, Type: string(task.Type),
		Status: string(task.Status), Prompt: task.Prompt, CreatedAt: task.CreatedAt})
}
