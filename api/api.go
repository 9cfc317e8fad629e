// Package api is agentworker's HTTP API. Every /v1 route is in one table
// (routes) and is served behind one guard, so CORS, auth, the refusal of a
// resource the bearer may not see and the error body cannot differ between
// routes:
//
//	GET  /v1/tasks/{id}/events      a task's events (SSE, until the token expires); the SSE id is the seq
//	                                or, with Accept: application/json, a page {"events", "next"} [?after=&limit=]
//	POST /v1/tasks/{id}/cancel      steer a task; optional {"expected_version": n}
//	POST /v1/tasks/{id}/pause
//	POST /v1/tasks/{id}/resume
//	POST /v1/tasks/{id}/retry
//	POST /v1/tasks/{id}/answer      {"answer": "…"} (required)
//	POST /v1/tasks/{id}/approve     a task in review: apply its change set (409 CHANGE_CONFLICT if a file changed since)
//	POST /v1/tasks/{id}/reject      a task in review: {"feedback": "…"} revises it; without feedback it is cancelled
//	GET  /v1/tasks/{id}/comments    a task's review comments
//	POST /v1/tasks/{id}/comments    {"body", "path", "line"}: comment on its diff
//	GET  /v1/projects/{id}/events   a project's events (SSE, until the token expires); an opaque cursor
//	POST /v1/projects/{id}/tasks    create a task: {"type", "prompt", "input"}
//	GET  /v1/projects/{id}/inbox    open inbox items [?all=true&limit=n]
//	POST /v1/inbox/{id}/close       close an item that needs no answer
//	GET  /v1/projects/{id}/tasks    the project's tasks, newest first [?limit=n&before=task_id]
//	GET  /v1/tasks/{id}             a task with its input, result and error
//	GET  /v1/tasks/{id}/changes     what a build changed: a unified diff per file
//	GET  /v1/projects/{id}/files    the project's files in storage
//	GET  /v1/projects/{id}/files/{path}  one file's content
//	GET  /v1/projects/{id}/usage    runs, tokens and cost per UTC day [?days=n]
//	GET  /v1/projects/{id}/runs/summary  runs per day, agent, status and error code [?days=n]
//	GET  /v1/projects/{id}/logs     log events, newest first [?task=&run=&level=&q=&before=&limit=]
//	GET  /v1/projects/{id}/docs     the project's documents by path [?after=&limit=]
//	POST /v1/projects/{id}/docs/index  refresh the documents index from the project's files
//	POST /v1/projects/{id}/tasks/broadcast/{command}  pause, resume, cancel or retry many tasks:
//	                                {"statuses", "task_ids", "expected_versions"}; default the running ones
//
// The guard, in order: nosniff, CORS headers for an allowed Origin and 204
// to a preflight; 503 while auth is not configured; 401 without a valid
// bearer token (package auth; in the access_token query parameter only for
// the event streams), or with one an operator revoked (which also ends the
// streams open with it, within RevocationCheck); 415 for a write
// whose body is not application/json; then the route's {id} must be a
// resource the token covers; 429 for a stream past the process's or the
// token's cap of open streams. A refusal closes the connection rather than
// read a body the handler never will. A task or inbox item of another
// project is answered exactly like a missing one (403, as a project outside
// the token is), so the API is no oracle for what exists. Every refusal and failure is
// {"error": {"code", "message"}} with Content-Type application/json. A
// refusal (401, 403, an illegal transition) is recorded in audit_log, a
// few per actor a minute.
//
// The steering routes call the SQL function apps reach through PostgREST,
// agentworker_control_task, so the state machine, the version check and the
// audit event are one implementation.
package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/handlers/projectctx"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/traceid"
	"github.com/agentworker/agentworker/tracing"
)

// Config configures the API.
type Config struct {
	// Verifier checks bearer tokens. When nil, every /v1 route answers 503:
	// auth is not configured (JWT_SECRET unset). Defaults to nil.
	Verifier *auth.Verifier
	// AllowedOrigins lists the origins allowed by CORS ("*" for any). The
	// page served by the worker itself needs none. Defaults to none.
	AllowedOrigins []string
	// Logger receives the failures answered 500. Defaults to discarding.
	Logger *slog.Logger
	// Store is the project file store the files routes read. When nil,
	// they answer 503. Defaults to nil.
	Store storage.Store
	// MaxStreams caps the event streams open in this process; past it a
	// stream is answered 429. Defaults to 1000.
	MaxStreams int
	// MaxStreamsPerToken caps the event streams one token holds open (a
	// console tab holds two); past it, 429. Defaults to 20.
	MaxStreamsPerToken int
	// RevocationCheck is how often the tokens of the open event streams are
	// checked against the revocations (agentworker revoke); a revoked
	// token's streams end. Defaults to 1 second.
	RevocationCheck time.Duration
	// AuditPerActorPerMinute caps the refused requests of one actor
	// recorded in audit_log a minute; the rest are counted in its next
	// record. Defaults to 10.
	AuditPerActorPerMinute int
	// Prices are the models an agent may name: one not listed is refused
	// (MODEL_UNPRICED), as are tasks of an agent naming one. Defaults to
	// llm.DefaultPrices().
	Prices llm.Prices
	// RuleFallbacks are the rules file names after AGENTS.override.md and
	// AGENTS.md (RULES_FALLBACKS), which the documents index counts as
	// documents. Defaults (nil) to CLAUDE.md; empty and non-nil: none.
	RuleFallbacks []string
	// ProjectMaxCostUSDPerDay is the daily cost cap of a project without
	// its own (PROJECT_MAX_COST_USD_PER_DAY): the settings read shows it,
	// and a change of a project's cap resumes its tasks paused at the cap
	// when the project is under the new one. Defaults to 0: no cap.
	ProjectMaxCostUSDPerDay float64
	// Tracing, if set, makes each request of a route that creates a task
	// a server span, which the task's attempts join. Defaults to off.
	Tracing *tracing.Telemetry
}

// API serves the /v1 routes.
type API struct {
	pool    *pgxpool.Pool
	streams *sse.Streams
	cfg     Config
	slots   *streamSlots

	refusals *refusalLimiter
}

// New returns the API over pool, serving the event streams of streams.
func New(pool *pgxpool.Pool, streams *sse.Streams, cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Lines logged with a request's context name its trace.
	cfg.Logger = slog.New(traceid.NewHandler(cfg.Logger.Handler()))
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 1000
	}
	if cfg.MaxStreamsPerToken <= 0 {
		cfg.MaxStreamsPerToken = 20
	}
	if cfg.RevocationCheck <= 0 {
		cfg.RevocationCheck = time.Second
	}
	if cfg.AuditPerActorPerMinute <= 0 {
		cfg.AuditPerActorPerMinute = 10
	}
	if cfg.Prices == nil {
		cfg.Prices = llm.DefaultPrices()
	}
	if cfg.RuleFallbacks == nil {
		cfg.RuleFallbacks = projectctx.DefaultRuleFallbacks
	}
	return &API{pool: pool, streams: streams, cfg: cfg,
		slots: &streamSlots{max: cfg.MaxStreams, perToken: cfg.MaxStreamsPerToken,
			live: map[*liveStream]struct{}{}, byToken: map[[sha256.Size]byte]int{}},
		refusals: &refusalLimiter{perMinute: cfg.AuditPerActorPerMinute, actors: map[string]*refusalWindow{}}}
}

// scope says what a route's {id} names, and so what the guard checks before
// the handler runs.
type scope int

const (
	projectScope scope = iota // a project the token must cover
	taskScope                 // a task whose project the token must cover
	inboxScope                // an inbox item whose project the token must cover
	agentScope                // an agent whose project the token must cover
)

// handler serves a request the guard let through. It returns an error only
// when it has written nothing; the guard answers it (fail).
type handler func(w http.ResponseWriter, r *http.Request) error

type route struct {
	pattern string // "METHOD /v1/…{id}…"
	scope   scope
	handle  handler
	stream  bool // long-lived: it ends when the bearer's token expires
	// traced: the route creates tasks; its request is a span (tracing
	// on), which the tasks it creates name as their trace parent.
	traced bool
}

// routes is the one table of /v1 routes.
func (a *API) routes() []route {
	rs := []route{
		{pattern: "GET /v1/tasks/{id}/events", scope: taskScope, handle: a.streams.TaskEvents, stream: true},
		{pattern: "GET /v1/projects/{id}/events", scope: projectScope, handle: a.streams.ProjectEvents, stream: true},
		{pattern: "POST /v1/projects/{id}/tasks", scope: projectScope, handle: a.createTask, traced: true},
		{pattern: "GET /v1/projects/{id}/inbox", scope: projectScope, handle: a.listInbox},
		{pattern: "POST /v1/inbox/{id}/close", scope: inboxScope, handle: a.closeInbox},
		{pattern: "GET /v1/projects/{id}/tasks", scope: projectScope, handle: a.listTasks},
		{pattern: "GET /v1/projects/{id}/files", scope: projectScope, handle: a.listFiles},
		{pattern: "GET /v1/projects/{id}/files/{path...}", scope: projectScope, handle: a.readFile},
		{pattern: "GET /v1/projects/{id}/usage", scope: projectScope, handle: a.usage},
		{pattern: "GET /v1/projects/{id}/logs", scope: projectScope, handle: a.logs},
		{pattern: "GET /v1/projects/{id}/runs/summary", scope: projectScope, handle: a.runSummary},
		{pattern: "GET /v1/projects/{id}/settings", scope: projectScope, handle: a.projectSettings},
		{pattern: "PATCH /v1/projects/{id}/settings", scope: projectScope, handle: a.setProjectSettings},
		{pattern: "GET /v1/projects/{id}/docs", scope: projectScope, handle: a.listDocuments},
		{pattern: "POST /v1/projects/{id}/docs/index", scope: projectScope, handle: a.indexDocuments},
		{pattern: "GET /v1/tasks/{id}", scope: taskScope, handle: a.getTask},
		{pattern: "GET /v1/tasks/{id}/changes", scope: taskScope, handle: a.taskChanges},
		{pattern: "GET /v1/tasks/{id}/comments", scope: taskScope, handle: a.listComments},
		{pattern: "POST /v1/tasks/{id}/comments", scope: taskScope, handle: a.addComment},
		{pattern: "GET /v1/projects/{id}/agents", scope: projectScope, handle: a.listAgents},
		{pattern: "POST /v1/projects/{id}/agents", scope: projectScope, handle: a.createAgent},
		{pattern: "GET /v1/agents/{id}", scope: agentScope, handle: a.getAgent},
		{pattern: "PATCH /v1/agents/{id}", scope: agentScope, handle: a.updateAgent},
		{pattern: "DELETE /v1/agents/{id}", scope: agentScope, handle: a.deleteAgent},
	}
	for _, action := range agentsql.Actions {
		if action == agentsql.ActionApproveCall || action == agentsql.ActionDenyCall {
			continue // per call, below
		}
		rs = append(rs, route{pattern: "POST /v1/tasks/{id}/" + string(action), scope: taskScope, handle: a.control(action)})
	}
	rs = append(rs,
		route{pattern: "GET /v1/tasks/{id}/tool-calls", scope: taskScope, handle: a.listToolCalls},
		route{pattern: "GET /v1/projects/{id}/tool-calls", scope: projectScope, handle: a.pendingToolCalls},
		route{pattern: "POST /v1/tasks/{id}/tool-calls/{call_id}/approve", scope: taskScope, handle: a.control(agentsql.ActionApproveCall)},
		route{pattern: "POST /v1/tasks/{id}/tool-calls/{call_id}/deny", scope: taskScope, handle: a.control(agentsql.ActionDenyCall)})
	for _, command := range agentsql.BroadcastCommands {
		rs = append(rs, route{pattern: "POST /v1/projects/{id}/tasks/broadcast/" + string(command), scope: projectScope, handle: a.broadcast(command)})
	}
	return rs
}

// Register adds every /v1 route to mux, and under /v1/ an answer for the
// rest: 204 to a preflight, else 405 or 404, in the API's error body.
func (a *API) Register(mux *http.ServeMux) {
	rs := a.routes()
	for _, rt := range rs {
		mux.Handle(rt.pattern, a.guard(rt))
	}
	// One pattern per method: a method-less "/v1/" would conflict with a
	// page registered as "GET /".
	rest := a.edge("", unrouted(rs))
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodTrace} {
		mux.Handle(m+" /v1/", rest)
	}
}

// edge applies what holds for every /v1 request, routed or not: its trace
// id, nosniff, CORS, the answer to a preflight, and 503 while auth is not
// configured. Each request is logged at debug level once answered. With
// span set (a route's pattern) and tracing on, the request is a span.
func (a *API) edge(span string, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every line logged for the request, and a task it creates, carry
		// its trace id; the client reads it back in the answer. A W3C
		// traceparent names the trace (and the caller's span, the parent
		// of the tasks' spans), whatever X-Trace-ID says.
		ctx, trace, ok := tracing.Incoming(r.Context(), r.Header)
		if !ok {
			trace = traceid.FromRequest(r)
		}
		w.Header().Set(traceid.Header, trace)
		ctx = traceid.With(ctx, trace)
		var sp tracing.Span
		if span != "" {
			ctx, sp = a.cfg.Tracing.StartRequest(ctx, span, trace)
		}
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		start := time.Now()
		defer func() {
			sp.SetStatus(sw.Status())
			sp.End(nil)
			a.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "api request", slog.String("method", r.Method),
				slog.String("path", bounded(r.URL.Path)), slog.Int("status", sw.Status()),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
		}()
		// A browser never reads an answer as another type than it says
		// (a file's content as HTML, say).
		w.Header().Set("X-Content-Type-Options", "nosniff")
		a.cors(w, r)
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if a.cfg.Verifier == nil {
			a.fail(w, r, errUnavailable)
			return
		}
		if err := h(w, r); err != nil {
			a.fail(w, r, err)
		}
	})
}

// guard is edge, then the bearer's token, then the route's {id}. A stream
// ends when the token expires. A refusal is recorded in audit_log.
func (a *API) guard(rt route) http.Handler {
	span := ""
	if rt.traced {
		span = rt.pattern
	}
	return a.edge(span, func(w http.ResponseWriter, r *http.Request) error {
		var verified *auth.Claims
		err := a.serve(w, r, rt, &verified)
		if err != nil {
			a.auditRefusal(r, rt.pattern, verified, err)
		}
		return err
	})
}

// serve is guard's work; it sets *verified once the bearer's token is
// valid and not revoked.
func (a *API) serve(w http.ResponseWriter, r *http.Request, rt route, verified **auth.Claims) error {
	verify := a.cfg.Verifier.FromRequest
	if rt.stream {
		verify = a.cfg.Verifier.FromStreamRequest
	}
	claims, err := verify(r)
	if err != nil {
		return err
	}
	*verified = &claims // authentic, so named in the audit log even when revoked
	if err := a.notRevoked(r.Context(), claims); err != nil {
		return err
	}
	if err := jsonBody(r); err != nil {
		return err
	}
	acc, err := a.authorize(r, rt.scope, claims)
	if err != nil {
		return err
	}
	ctx := context.WithValue(r.Context(), accessKey{}, acc)
	if rt.stream {
		var end context.CancelCauseFunc
		ctx, end = context.WithCancelCause(ctx)
		defer end(nil)
		release, err := a.openStream(claims, end)
		if err != nil {
			w.Header().Set("Retry-After", "10")
			return err
		}
		defer release()
	}
	if rt.stream && claims.ExpiresAt != nil { // the verifier requires exp
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, claims.ExpiresAt.Time, sse.ErrExpired)
		defer cancel()
	}
	return rt.handle(w, r.WithContext(ctx))
}

// streamSlots counts the open event streams, in the process and per token:
// each holds a goroutine, buffers and a subscription for as long as its
// client likes. While any is open, one goroutine (watchRevocations) ends
// those whose token was revoked.
type streamSlots struct {
	max, perToken int

	mu       sync.Mutex
	live     map[*liveStream]struct{}
	byToken  map[[sha256.Size]byte]int
	watching bool          // watchRevocations runs
	idle     chan struct{} // closed when the last stream ends while it runs
}

// liveStream is an open event stream: its token's claims, and how to end it.
type liveStream struct {
	claims auth.Claims
	end    context.CancelCauseFunc
}

var (
	errTooManyStreams      = &apiError{http.StatusTooManyRequests, CodeTooManyStreams, "too many event streams open on this server; retry later"}
	errTooManyTokenStreams = &apiError{http.StatusTooManyRequests, CodeTooManyStreams, "too many event streams open with this token; close one"}
)

// openStream holds a place for a stream of claims' token, or refuses one
// past a cap. Until release, a revocation of the token ends the stream
// through end, with cause sse.ErrRevoked.
func (a *API) openStream(claims auth.Claims, end context.CancelCauseFunc) (release func(), err error) {
	s := a.slots
	token := claims.Fingerprint()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byToken[token] >= s.perToken:
		return nil, errTooManyTokenStreams
	case len(s.live) >= s.max:
		return nil, errTooManyStreams
	}
	ls := &liveStream{claims: claims, end: end}
	s.live[ls] = struct{}{}
	s.byToken[token]++
	if !s.watching {
		s.watching = true
		go a.watchRevocations()
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.live, ls)
		if s.byToken[token]--; s.byToken[token] == 0 {
			delete(s.byToken, token)
		}
		if len(s.live) == 0 && s.idle != nil {
			close(s.idle)
			s.idle = nil
		}
	}, nil
}

// watchRevocations ends, every RevocationCheck, the open streams whose
// token a revocation refuses, until no stream is open.
func (a *API) watchRevocations() {
	s := a.slots
	tick := time.NewTicker(a.cfg.RevocationCheck)
	defer tick.Stop()
	for {
		s.mu.Lock()
		if len(s.live) == 0 {
			s.watching = false
			s.mu.Unlock()
			return
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle := s.idle
		s.mu.Unlock()
		select {
		case <-idle:
			continue
		case <-tick.C:
		}
		if err := a.endRevokedStreams(); err != nil {
			// The streams are checked again at the next tick.
			a.cfg.Logger.Warn("api: check the open streams' tokens for revocations", slog.String("err", err.Error()))
		}
	}
}

// endRevokedStreams reads the revocations of the open streams' scopes in
// one query and ends the streams whose token they refuse.
func (a *API) endRevokedStreams() error {
	s := a.slots
	s.mu.Lock()
	streams := make([]*liveStream, 0, len(s.live))
	scopes := []string{agentsql.AllTokens}
	for ls := range s.live {
		streams = append(streams, ls)
		scopes = append(scopes, ls.claims.Projects...)
	}
	s.mu.Unlock()
	slices.Sort(scopes)
	scopes = slices.Compact(scopes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	revocations, err := agentsql.TokenRevocations(ctx, a.pool, scopes)
	if err != nil {
		return err
	}
	for _, ls := range streams {
		nb := revocations[agentsql.AllTokens]
		for _, p := range ls.claims.Projects {
			if t := revocations[p]; t.After(nb) {
				nb = t
			}
		}
		if revokedBy(ls.claims, nb) {
			ls.end(sse.ErrRevoked)
		}
	}
	return nil
}

// notRevoked refuses a token issued before the latest revocation of its
// projects or of every token (agentsql.RevokeTokens), or one without iat
// once a revocation applies to it: a leaked token can be ended before its
// exp.
func (a *API) notRevoked(ctx context.Context, c auth.Claims) error {
	nb, err := agentsql.TokensNotBefore(ctx, a.pool, append([]string{agentsql.AllTokens}, c.Projects...))
	if err != nil {
		return err
	}
	if revokedBy(c, nb) {
		return fmt.Errorf("%w: token issued before its revocation at %s", auth.ErrUnauthenticated, nb.Format(time.RFC3339))
	}
	return nil
}

// revokedBy reports whether a revocation at nb (zero: none) refuses the
// token of c: one issued before it, or without iat.
func revokedBy(c auth.Claims, nb time.Time) bool {
	return !nb.IsZero() && (c.IssuedAt == nil || c.IssuedAt.Before(nb))
}

// jsonBody refuses a write whose body is not declared application/json: a
// page of another origin can send text/plain, a form or multipart without a
// preflight, never JSON. A write without a body needs no type.
func jsonBody(r *http.Request) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &apiError{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "the request body must be application/json"}
	}
	return nil
}

// access is what the guard established about a request.
type access struct {
	claims auth.Claims
	id     uuid.UUID          // the route's {id}
	task   agentsql.Task      // for task routes
	item   agentsql.InboxItem // for inbox item routes
	agent  agentsql.Agent     // for agent routes
}

type accessKey struct{}

// accessOf returns what the guard established about r.
func accessOf(r *http.Request) access {
	acc, _ := r.Context().Value(accessKey{}).(access)
	return acc
}

// authorize checks that claims cover the resource the route's {id} names.
func (a *API) authorize(r *http.Request, sc scope, claims auth.Claims) (access, error) {
	acc := access{claims: claims}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return acc, validation("id %q is not a uuid", r.PathValue("id"))
	}
	acc.id = id
	var projectID uuid.UUID
	switch sc {
	case projectScope:
		projectID = id
	case taskScope:
		if acc.task, err = agentsql.GetTask(r.Context(), a.pool, id); err != nil {
			return acc, notVisible(claims, err)
		}
		projectID = acc.task.ProjectID
	case inboxScope:
		if acc.item, err = agentsql.GetInboxItem(r.Context(), a.pool, id); err != nil {
			return acc, notVisible(claims, err)
		}
		projectID = acc.item.ProjectID
	case agentScope:
		if acc.agent, err = agentsql.GetAgent(r.Context(), a.pool, id); err != nil {
			return acc, notVisible(claims, err)
		}
		projectID = acc.agent.ProjectID
	}
	if !claims.CanAccess(projectID.String()) {
		return acc, auth.ErrForbidden
	}
	return acc, nil
}

// cors sets the CORS headers for an allowed Origin, on every /v1 answer
// (errors included, so a browser can read them).
func (a *API) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	if !slices.Contains(a.cfg.AllowedOrigins, "*") && !slices.Contains(a.cfg.AllowedOrigins, origin) {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, "+traceid.Header+", traceparent, tracestate")
	h.Set("Access-Control-Expose-Headers", traceid.Header)
	h.Set("Access-Control-Max-Age", "600")
}

// unrouted answers a /v1 request no route matches: 405 (with Allow) when
// the path is a route's under another method, else 404.
func unrouted(rs []route) handler {
	paths := http.NewServeMux()
	allowed := map[string][]string{}
	for _, rt := range rs {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if allowed[path] == nil {
			paths.Handle(path, http.NotFoundHandler()) // only matched, never served
		}
		allowed[path] = append(allowed[path], method)
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, pattern := paths.Handler(r); pattern != "" {
			w.Header().Set("Allow", strings.Join(allowed[pattern], ", "))
			return &apiError{http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method not allowed"}
		}
		return &apiError{http.StatusNotFound, CodeNotFound, "not found"}
	}
}

// statusWriter remembers the status of the answer, for the request's log
// line; Unwrap lets http.ResponseController reach the connection (flushes
// of the event streams, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the status answered, 200 when nothing was written yet.
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
