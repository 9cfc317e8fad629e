// Package sse streams the events of a task or of a whole project to
// browsers and other clients as Server-Sent Events, resumable with
// Last-Event-ID. One Hub (one LISTEN connection) per process wakes every
// stream; streams read the events themselves from their cursor, so a client
// never skips or repeats one. Package api registers the streams as its
// routes, behind its guard (CORS, auth); Client follows them from Go.
//
// A stream starts after the cursor in the Last-Event-ID header, else in the
// last_event_id or after query parameter, else at the beginning. It ends
// when the client leaves, the hub stops, or the request's context ends;
// when that context ends with cause ErrExpired (the bearer's token expired)
// it first sends an "expired" event, with cause ErrRevoked (an operator
// revoked it) a "revoked" one. A task's events that were archived and
// dropped from agent_events are read from Config.Archive, in their place.
// A task's events are also served as one JSON page, to a request that
// accepts application/json and not text/event-stream.
package sse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Config configures Streams.
type Config struct {
	// Heartbeat is the interval of comment lines that keep idle streams
	// (and proxies) alive. Defaults to 15 seconds.
	Heartbeat time.Duration
	// HeldRecheck is how often a project stream rereads while events of the
	// project wait for an older transaction to end. Defaults to 20 ms.
	HeldRecheck time.Duration
	// Batch is the most events read per query. Defaults to 500.
	Batch int
	// Logger defaults to slog.Default.
	Logger *slog.Logger
	// Archive, when set, serves the events of a task's timeline that were
	// archived and are no longer rows (events.ReadTimeline), with the same
	// ids and bytes. Defaults to none: a task stream reads rows only.
	Archive events.Archive
}

// Streams serves the event streams.
type Streams struct {
	pool *pgxpool.Pool
	hub  *Hub
	cfg  Config
}

// NewStreams returns Streams reading events from pool, woken by hub (whose
// Run the caller starts).
func NewStreams(pool *pgxpool.Pool, hub *Hub, cfg Config) *Streams {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
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
	return &Streams{pool: pool, hub: hub, cfg: cfg}
}

var (
	// ErrBadCursor: the request's resume cursor is malformed or names no
	// event of the project.
	ErrBadCursor = errors.New("invalid cursor")
	// ErrExpired, as the cause of a stream request's context
	// (context.WithDeadlineCause), ends the stream with a final "expired"
	// event: the bearer's token ran out, and a client must come back with a
	// fresh one.
	ErrExpired = errors.New("stream authorization expired")
	// ErrRevoked, as the cause of a stream request's context, ends the
	// stream with a final "revoked" event: an operator revoked the bearer's
	// token.
	ErrRevoked = errors.New("stream authorization revoked")
)

// expiredEvent is the last message of a stream whose token expired; its
// type is not "message", so EventSource's onmessage and Client skip it.
const expiredEvent = "event: expired\ndata: {\"message\":\"token expired\"}\n\n"

// revokedEvent is the last message of a stream whose token was revoked.
const revokedEvent = "event: revoked\ndata: {\"message\":\"token revoked\"}\n\n"

// pathID parses the {id} path value.
func pathID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, fmt.Errorf("path id %q: %w", r.PathValue("id"), err)
	}
	return id, nil
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

// TaskEvents streams the events of the task {id}; the SSE id is the
// event's seq. A request for JSON gets one page instead (TaskEventsPage). The caller has authorized the bearer for the task. It
// returns an error only when it has written nothing: one wrapping
// ErrBadCursor for a malformed cursor, else a failure of the server.
func (s *Streams) TaskEvents(w http.ResponseWriter, r *http.Request) error {
	taskID, err := pathID(r)
	if err != nil {
		return err
	}
	after := 0
	if c := cursorParam(r); c != "" {
		if after, err = strconv.Atoi(c); err != nil || after < 0 {
			return fmt.Errorf("task cursor %q: %w", c, ErrBadCursor)
		}
	}
	if wantsJSON(r) {
		return s.taskEventsPage(w, r, taskID, after)
	}
	sub := s.hub.SubscribeTask(taskID)
	defer sub.Close()
	s.stream(w, r, sub, func(ctx context.Context, write func(id string, ev events.Event) error, recheck bool) (bool, error) {
		// The hub's rows first: while they continue the cursor, the table
		// need not be read.
		rows, mustRead := sub.Take()
		for _, row := range rows {
			if *row.Seq <= after {
				continue // read from the table already
			}
			if *row.Seq != after+1 {
				mustRead = true // a gap: this stream was behind the hub
				break
			}
			if err := write(strconv.Itoa(*row.Seq), events.FromRow(row)); err != nil {
				return false, err
			}
			after = *row.Seq
		}
		if !mustRead && !recheck {
			return false, nil
		}
		next, err := events.ReadTimeline(ctx, s.pool, s.cfg.Archive, taskID, after, s.cfg.Batch, func(ev events.Event) error {
			return write(strconv.Itoa(ev.Seq), ev)
		})
		after = next
		if err != nil {
			return false, err
		}
		sub.Seen(after)
		return false, nil
	})
	return nil
}

// MaxPage is the most events one JSON page of a task's events holds.
const MaxPage = 1000

// ErrBadLimit: the request's page size is malformed or out of range.
var ErrBadLimit = errors.New("invalid limit")

// wantsJSON reports a request for a page of JSON rather than a stream: it
// accepts application/json and not text/event-stream (EventSource sends
// the latter).
func wantsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/event-stream")
}

// TaskEventsPage is a JSON page of a task's events.
type TaskEventsPage struct {
	Events []events.Event `json:"events"`
	// Next is the cursor of the next page (the last seq here) when the page
	// is full; absent on the last page.
	Next *int `json:"next,omitempty"`
}

// taskEventsPage answers one page of the task's events after the cursor,
// at most ?limit= (1 to MaxPage, default the stream's batch), read as the
// stream reads them (archive, then rows).
func (s *Streams) taskEventsPage(w http.ResponseWriter, r *http.Request, taskID uuid.UUID, after int) error {
	limit := min(s.cfg.Batch, MaxPage)
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPage {
			return fmt.Errorf("limit %q, want 1 to %d: %w", v, MaxPage, ErrBadLimit)
		}
		limit = n
	}
	page := TaskEventsPage{Events: []events.Event{}}
	errFull := errors.New("page full")
	_, err := events.ReadTimeline(r.Context(), s.pool, s.cfg.Archive, taskID, after, limit, func(ev events.Event) error {
		page.Events = append(page.Events, ev)
		if len(page.Events) == limit {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return err
	}
	if len(page.Events) == limit {
		next := page.Events[limit-1].Seq
		page.Next = &next
	}
	body, err := json.Marshal(page)
	if err != nil {
		return fmt.Errorf("encode %d events of task %s: %w", len(page.Events), taskID, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
	return nil
}

// FormatProjectCursor renders a project stream's SSE id.
func FormatProjectCursor(c agentsql.ProjectCursor) string {
	return strconv.FormatInt(c.Xid, 10) + "-" + strconv.FormatInt(c.ID, 10)
}

// parseProjectCursor reads a cursor of FormatProjectCursor, or a plain
// event id (whose cursor is looked up).
func (s *Streams) parseProjectCursor(ctx context.Context, projectID uuid.UUID, v string) (agentsql.ProjectCursor, error) {
	bad := fmt.Errorf("project cursor %q: %w", v, ErrBadCursor)
	if xs, ids, ok := strings.Cut(v, "-"); ok {
		x, err1 := strconv.ParseInt(xs, 10, 64)
		id, err2 := strconv.ParseInt(ids, 10, 64)
		if err1 != nil || err2 != nil || x < 0 || id < 0 {
			return agentsql.ProjectCursor{}, bad
		}
		return agentsql.ProjectCursor{Xid: x, ID: id}, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 0 {
		return agentsql.ProjectCursor{}, bad
	}
	if id == 0 {
		return agentsql.ProjectCursor{}, nil
	}
	cur, err := agentsql.EventCursor(ctx, s.pool, projectID, id)
	if errors.Is(err, agentsql.ErrEventNotFound) {
		return cur, bad
	}
	return cur, err
}

// ProjectEvents streams the events of every task of the project {id}; the
// SSE id is an opaque cursor (FormatProjectCursor). The caller has
// authorized the bearer for the project. It returns an error only when it
// has written nothing: one wrapping ErrBadCursor for a malformed cursor,
// else a failure of the server.
func (s *Streams) ProjectEvents(w http.ResponseWriter, r *http.Request) error {
	projectID, err := pathID(r)
	if err != nil {
		return err
	}
	var cur agentsql.ProjectCursor
	if c := cursorParam(r); c != "" {
		if cur, err = s.parseProjectCursor(r.Context(), projectID, c); err != nil {
			return err
		}
	}
	sub := s.hub.SubscribeProject(projectID)
	defer sub.Close()
	// The floor of the cursor it connected with bounds every later read:
	// read once, not on every announcement.
	var floor agentsql.EventFloor
	s.stream(w, r, sub, func(ctx context.Context, write func(id string, ev events.Event) error, _ bool) (bool, error) {
		if !floor.Known() {
			f, err := agentsql.ProjectEventFloor(ctx, s.pool, cur)
			if err != nil {
				return false, fmt.Errorf("read events of project %s: %w", projectID, err)
			}
			floor = f
		}
		for {
			rows, held, err := agentsql.ProjectEventsAfterFloor(ctx, s.pool, projectID, cur, floor, s.cfg.Batch)
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
	return nil
}

// catchUp writes the events after the stream's cursor and reports whether
// some are held back (to be reread soon). recheck says the wake-up came from
// the stream's own timer (connecting, held events), not the hub: the stream
// must read the table.
type catchUp func(ctx context.Context, write func(id string, ev events.Event) error, recheck bool) (held bool, err error)

// stream runs one SSE response: headers, then catch-up on connecting, on
// every wake-up of the hub and, while a project's events are held, on the
// held-event timer, with heartbeats, until the client leaves, the server
// shuts down or the token expires (the request's context), or the hub
// stops. Nothing else reads: between announcements a stream costs the
// database nothing (the hub's sweep is the backstop for a lost one).
func (s *Streams) stream(w http.ResponseWriter, r *http.Request, sub *Subscription, catch catchUp) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	// A stream outlives the server's read and write timeouts, which bound
	// every other request.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
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
	defer func() {
		last := ""
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, ErrExpired):
			last = expiredEvent
		case errors.Is(cause, ErrRevoked):
			last = revokedEvent
		}
		if last != "" {
			_, _ = fmt.Fprint(w, last)
			_ = rc.Flush()
		}
	}()

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
	// The first catch-up reads the table whatever woke it: a hub wake-up
	// can win the race with the timer at 0, whose firing the Reset below
	// then discards.
	first := true
	for {
		timer := first
		first = false
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
			timer = true
		}
		held, err := catch(ctx, write, timer)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "sse stream ended", slog.String("path", r.URL.Path), slog.String("err", err.Error()))
			}
			return
		}
		if rc.Flush() != nil {
			return
		}
		if held {
			recheck.Reset(s.cfg.HeldRecheck)
		} else {
			recheck.Stop() // also drops the first firing, if a wake-up won
		}
	}
}
