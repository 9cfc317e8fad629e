package sse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
)

// Hub holds the process's one LISTEN connection on agent_events and wakes
// the subscribers an event concerns, however many clients are connected.
// Notifications only wake: subscribers read the events from their own
// cursor, so a dropped notification costs latency, never an event.
type Hub struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu       sync.Mutex
	byTask   map[uuid.UUID]map[*Subscription]struct{}
	byProj   map[uuid.UUID]map[*Subscription]struct{}
	done     chan struct{}
	doneOnce sync.Once
}

// NewHub returns a Hub listening through a connection taken from pool (and
// not returned to it). Call Run to start it. logger defaults to slog.Default.
func NewHub(pool *pgxpool.Pool, logger *slog.Logger) *Hub {
	if logger == nil {
		logger = slog.Default()
	}
	return &Hub{
		pool: pool, log: logger,
		byTask: map[uuid.UUID]map[*Subscription]struct{}{},
		byProj: map[uuid.UUID]map[*Subscription]struct{}{},
		done:   make(chan struct{}),
	}
}

// Subscription is a wake-up signal for the events of one task or project.
type Subscription struct {
	hub     *Hub
	task    uuid.UUID
	project uuid.UUID
	c       chan struct{}
}

// C receives a value after an event of the subscription's task or project
// was committed (coalesced: one value may stand for many events), and after
// the hub (re)connects.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Close ends the subscription.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.task != uuid.Nil {
		delete(h.byTask[s.task], s)
		if len(h.byTask[s.task]) == 0 {
			delete(h.byTask, s.task)
		}
	} else {
		delete(h.byProj[s.project], s)
		if len(h.byProj[s.project]) == 0 {
			delete(h.byProj, s.project)
		}
	}
}

// SubscribeTask subscribes to the events of one task.
func (h *Hub) SubscribeTask(taskID uuid.UUID) *Subscription {
	return h.subscribe(&Subscription{hub: h, task: taskID, c: make(chan struct{}, 1)}, h.byTask, taskID)
}

// SubscribeProject subscribes to the events of every task of a project.
func (h *Hub) SubscribeProject(projectID uuid.UUID) *Subscription {
	return h.subscribe(&Subscription{hub: h, project: projectID, c: make(chan struct{}, 1)}, h.byProj, projectID)
}

func (h *Hub) subscribe(s *Subscription, m map[uuid.UUID]map[*Subscription]struct{}, key uuid.UUID) *Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m[key] == nil {
		m[key] = map[*Subscription]struct{}{}
	}
	m[key][s] = struct{}{}
	return s
}

// Done is closed when Run has returned: streams end with it.
func (h *Hub) Done() <-chan struct{} { return h.done }

func wake(s *Subscription) {
	select {
	case s.c <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range []map[uuid.UUID]map[*Subscription]struct{}{h.byTask, h.byProj} {
		for _, subs := range m {
			for s := range subs {
				wake(s)
			}
		}
	}
}

func (h *Hub) dispatch(payload string) {
	var key agentsql.Announcement
	if err := json.Unmarshal([]byte(payload), &key); err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range key.Tasks {
		for s := range h.byTask[t] {
			wake(s)
		}
	}
	for _, p := range key.Projects {
		for s := range h.byProj[p] {
			wake(s)
		}
	}
}

const (
	hubMinBackoff = 100 * time.Millisecond
	hubMaxBackoff = 5 * time.Second
)

// Run listens until ctx is done, reconnecting with backoff after a lost
// connection (and waking every subscriber once it listens again, to catch
// up on what it may have missed). It returns nil when ctx ends, and closes
// Done.
func (h *Hub) Run(ctx context.Context) error {
	defer h.doneOnce.Do(func() { close(h.done) })
	backoff := hubMinBackoff
	for {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		h.log.WarnContext(ctx, "sse hub: listener connection lost; reconnecting", slog.String("err", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, hubMaxBackoff)
	}
}

func (h *Hub) listen(ctx context.Context) error {
	pc, err := h.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listener connection: %w", err)
	}
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		return fmt.Errorf("listen %s: %w", agentsql.EventsChannel, err)
	}
	h.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		h.dispatch(n.Payload)
	}
}
