package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
)

// DefaultAnnounceInterval is the least time between two notifications an
// Announcer sends: announcements arriving faster are merged into the next.
const DefaultAnnounceInterval = 3 * time.Millisecond

// Announcer notifies listeners of agent_events, after commit, which tasks
// and projects have new events. Postgres's NOTIFY takes one cluster-wide
// lock in the committing transaction and holds it through the commit, so a
// task's own transactions never notify: its Recorder hands the task to the
// process's one Announcer, which sends one notification for all of them at
// most every interval, in a transaction of its own that writes nothing else.
// Listeners read from their own cursor, so a merged or lost announcement
// costs latency, never an event.
type Announcer struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	pending map[uuid.UUID]uuid.UUID // task → project
	wake    chan struct{}
}

// AnnouncerOption configures an Announcer.
type AnnouncerOption func(*Announcer)

// WithAnnounceInterval sets the least time between two notifications.
// Defaults to DefaultAnnounceInterval.
func WithAnnounceInterval(d time.Duration) AnnouncerOption {
	return func(a *Announcer) { a.interval = d }
}

// NewAnnouncer returns an Announcer sending through a connection taken from
// pool (and not returned to it). Call Run to start it. logger defaults to
// discarding.
func NewAnnouncer(pool *pgxpool.Pool, logger *slog.Logger, opts ...AnnouncerOption) *Announcer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Announcer{pool: pool, log: logger, interval: DefaultAnnounceInterval,
		pending: map[uuid.UUID]uuid.UUID{}, wake: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// Announce queues a task whose events have committed.
func (a *Announcer) Announce(taskID, projectID uuid.UUID) {
	a.mu.Lock()
	a.pending[taskID] = projectID
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Run sends announcements until ctx is done, then sends what is still
// queued. A failed send keeps its tasks queued for the next one.
func (a *Announcer) Run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := a.flush(fctx, &conn); err != nil {
				a.log.WarnContext(fctx, "announce events at shutdown", slog.String("err", err.Error()))
			}
			return nil
		case <-a.wake:
		}
		if wait := a.interval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				continue // the shutdown flush above sends it
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := a.flush(ctx, &conn); err != nil && ctx.Err() == nil {
			a.log.WarnContext(ctx, "announce events; retrying", slog.String("err", err.Error()))
			select { // retry, not faster than the connection can come back
			case a.wake <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// flush sends every queued task in one transaction of its own.
func (a *Announcer) flush(ctx context.Context, conn **pgx.Conn) error {
	a.mu.Lock()
	batch := a.pending
	if len(batch) == 0 {
		a.mu.Unlock()
		return nil
	}
	a.pending = make(map[uuid.UUID]uuid.UUID, len(batch))
	a.mu.Unlock()

	err := a.send(ctx, conn, payloads(batch))
	if err != nil {
		a.mu.Lock()
		for t, p := range batch {
			if _, newer := a.pending[t]; !newer {
				a.pending[t] = p
			}
		}
		a.mu.Unlock()
	}
	return err
}

func (a *Announcer) send(ctx context.Context, conn **pgx.Conn, msgs []string) error {
	if *conn == nil {
		pc, err := a.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("acquire announcer connection: %w", err)
		}
		c := pc.Hijack()
		// The transaction only notifies: it need not wait for its commit
		// record to reach disk, which shortens the time it holds the lock.
		if _, err := c.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			c.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("set up announcer connection: %w", err)
		}
		*conn = c
	}
	if _, err := (*conn).Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) p`, agentsql.EventsChannel, msgs); err != nil {
		(*conn).Close(context.WithoutCancel(ctx))
		*conn = nil
		return fmt.Errorf("notify %s (%d payloads): %w", agentsql.EventsChannel, len(msgs), err)
	}
	return nil
}

// payloads encodes tasks as announcements of at most AnnouncementBatch tasks.
func payloads(tasks map[uuid.UUID]uuid.UUID) []string {
	var (
		out  []string
		cur  agentsql.Announcement
		seen = map[uuid.UUID]bool{}
	)
	emit := func() {
		body, _ := json.Marshal(cur) // uuids always encode
		out = append(out, string(body))
		cur, seen = agentsql.Announcement{}, map[uuid.UUID]bool{}
	}
	for t, p := range tasks {
		cur.Tasks = append(cur.Tasks, t)
		if !seen[p] {
			seen[p] = true
			cur.Projects = append(cur.Projects, p)
		}
		if len(cur.Tasks) == agentsql.AnnouncementBatch {
			emit()
		}
	}
	if len(cur.Tasks) > 0 {
		emit()
	}
	return out
}
