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
//
// For task subscriptions the Hub also reads: once a subscriber has said how
// far it has read (Subscription.Seen), an announcement of its task makes the
// Hub read the task's new events after the least position of its
// subscribers, once for every announced task in one query, and hand the
// rows to each, instead of every stream querying on its own wake-up. A
// subscriber that has not said, or that finds a gap in what it was handed
// (its buffer overflowed), reads the table itself.
//
// Streams never reread on a timer: an idle stream costs the database
// nothing. The backstop for an announcement that never came (its writer died
// between commit and announcement) is the Hub's sweep: one query per sweep
// interval for the whole process finds the tasks with newer events, and the
// Hub announces those that were not announced to the streams that follow
// them.
type Hub struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	sweep time.Duration

	mu     sync.Mutex
	byTask map[uuid.UUID]map[*Subscription]struct{}
	byProj map[uuid.UUID]map[*Subscription]struct{}
	want   map[uuid.UUID]struct{} // announced tasks the reader has yet to read
	// The event floors of the tasks followed, read once (a task's floor
	// never moves back), so that a read is one statement.
	floors map[uuid.UUID]agentsql.EventFloor
	wantC  chan struct{}
	// Tasks announced since the last sweep, and in the interval before.
	announced, announcedBefore map[uuid.UUID]struct{}
	done                       chan struct{}
	doneOnce                   sync.Once
}

// hubReadLimit is the most events of one task the Hub reads per query; a
// task that had more is read again at once.
const hubReadLimit = 500

// subscriptionBuffer is the most rows a subscription holds for its stream;
// past it they are dropped and the stream reads the table itself.
const subscriptionBuffer = 2 * hubReadLimit

// HubOption configures a Hub.
type HubOption func(*Hub)

// DefaultSweep is how often a Hub looks for events whose announcement was
// lost, unless WithSweep says otherwise.
const DefaultSweep = 2 * time.Second

// WithSweep sets how often the Hub looks for events whose announcement was
// lost: the most a lost announcement delays a stream.
func WithSweep(d time.Duration) HubOption {
	return func(h *Hub) {
		if d > 0 {
			h.sweep = d
		}
	}
}

// NewHub returns a Hub listening through a connection taken from pool (and
// not returned to it). Call Run to start it. logger defaults to slog.Default.
func NewHub(pool *pgxpool.Pool, logger *slog.Logger, opts ...HubOption) *Hub {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Hub{
		pool: pool, log: logger, sweep: DefaultSweep,
		byTask:    map[uuid.UUID]map[*Subscription]struct{}{},
		byProj:    map[uuid.UUID]map[*Subscription]struct{}{},
		want:      map[uuid.UUID]struct{}{},
		floors:    map[uuid.UUID]agentsql.EventFloor{},
		wantC:     make(chan struct{}, 1),
		done:      make(chan struct{}),
		announced: map[uuid.UUID]struct{}{}, announcedBefore: map[uuid.UUID]struct{}{},
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Subscription is a wake-up signal for the events of one task or project,
// and for a task, the events the Hub read for it.
type Subscription struct {
	hub     *Hub
	task    uuid.UUID
	project uuid.UUID
	c       chan struct{}

	// pos is the seq the subscriber has read up to, as far as the hub
	// knows (known: it said, or was handed rows since); guarded by hub.mu.
	pos   int
	known bool

	mu       sync.Mutex
	rows     []agentsql.EventRow // read by the hub, not yet taken
	mustRead bool                // woken without rows, or rows were dropped
}

// C receives a value after an event of the subscription's task or project
// was committed (coalesced: one value may stand for many events), and after
// the hub (re)connects.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Take returns the events the Hub read for a task subscription since the
// last Take, in seq order, and whether the subscriber must read the table
// itself (the Hub did not read for it, or dropped rows).
func (s *Subscription) Take() (rows []agentsql.EventRow, mustRead bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows, mustRead = s.rows, s.mustRead
	s.rows, s.mustRead = nil, false
	return rows, mustRead
}

// Seen tells the Hub that a task subscriber has read its events up to seq
// from the table: from then on the Hub reads its task's new events for it.
func (s *Subscription) Seen(seq int) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if !s.known || seq > s.pos {
		s.pos, s.known = seq, true
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.task != uuid.Nil {
		delete(h.byTask[s.task], s)
		if len(h.byTask[s.task]) == 0 {
			delete(h.byTask, s.task)
			delete(h.want, s.task)
			delete(h.floors, s.task)
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

// wakeToRead wakes s to read the table itself.
func wakeToRead(s *Subscription) {
	s.mu.Lock()
	s.mustRead = true
	s.mu.Unlock()
	wake(s)
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range []map[uuid.UUID]map[*Subscription]struct{}{h.byTask, h.byProj} {
		for _, subs := range m {
			for s := range subs {
				wakeToRead(s)
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
	if len(h.byTask) > 0 || len(h.byProj) > 0 { // the sweep only runs then
		for _, t := range key.Tasks {
			h.announced[t] = struct{}{}
		}
	}
	h.announce(key)
}

// announce wakes the subscribers of the tasks and projects of key; h.mu is
// held.
func (h *Hub) announce(key agentsql.Announcement) {
	queued := false
	for _, t := range key.Tasks {
		for s := range h.byTask[t] {
			if !s.known {
				wakeToRead(s)
			} else if _, due := h.want[t]; !due {
				h.want[t] = struct{}{}
				queued = true
			}
		}
	}
	for _, p := range key.Projects {
		for s := range h.byProj[p] {
			wake(s)
		}
	}
	if queued {
		select {
		case h.wantC <- struct{}{}:
		default: // the reader is already due
		}
	}
}

// sweepLoop looks, every sweep interval while someone subscribes, for tasks
// with events newer than two sweeps ago, and announces those nobody
// announced in that time. Two intervals: an event can commit after a later
// id was seen.
func (h *Hub) sweepLoop(ctx context.Context) {
	tick := time.NewTicker(h.sweep)
	defer tick.Stop()
	low, high := int64(-1), int64(-1) // ids seen two sweeps ago and at the last
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !h.subscribed() {
			low, high = -1, -1 // a new stream reads the table itself
			continue
		}
		keys, top, err := agentsql.EventsSince(ctx, h.pool, low)
		if err != nil {
			if ctx.Err() == nil {
				h.log.WarnContext(ctx, "sse hub: sweep for unannounced events", slog.String("err", err.Error()))
			}
			continue
		}
		if low < 0 {
			low, high = top, top
			continue
		}
		h.announceMissed(keys)
		low, high = high, top
	}
}

func (h *Hub) subscribed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byTask) > 0 || len(h.byProj) > 0
}

// announceMissed announces the swept tasks that were not announced in the
// last two sweep intervals, and starts the next interval.
func (h *Hub) announceMissed(keys []agentsql.EventKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var missed agentsql.Announcement
	for _, k := range keys {
		_, now := h.announced[k.Task]
		_, before := h.announcedBefore[k.Task]
		if now || before {
			continue
		}
		if h.byTask[k.Task] != nil || h.byProj[k.Project] != nil {
			missed.Tasks = append(missed.Tasks, k.Task)
			missed.Projects = append(missed.Projects, k.Project)
		}
	}
	h.announcedBefore, h.announced = h.announced, make(map[uuid.UUID]struct{}, len(h.announced))
	for _, t := range missed.Tasks { // swept twice, announced once
		h.announced[t] = struct{}{}
	}
	if len(missed.Tasks) > 0 {
		// Usually a writer that died between commit and announcement; an
		// announcement still on its way after its commit also lands here.
		h.log.Debug("sse hub: announcing events nobody announced", slog.Int("tasks", len(missed.Tasks)))
		h.announce(missed)
	}
}

// readLoop reads the announced tasks' new events, all of them in one query
// per round, until ctx is done. Announcements that arrive during a read
// are merged into the next round.
func (h *Hub) readLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wantC:
		}
		for h.readRound(ctx) {
		}
	}
}

// readRound reads what is wanted, and reports whether a task is left to
// read at once (it had more than hubReadLimit new events).
func (h *Hub) readRound(ctx context.Context) (again bool) {
	h.mu.Lock()
	cursors := make([]agentsql.TaskCursor, 0, len(h.want))
	var unknown []uuid.UUID
	for t := range h.want {
		if after, ok := h.least(t); ok {
			cursors = append(cursors, agentsql.TaskCursor{Task: t, AfterSeq: after, Floor: h.floors[t]})
			if !h.floors[t].Known() {
				unknown = append(unknown, t)
			}
		}
	}
	clear(h.want)
	h.mu.Unlock()
	if len(cursors) == 0 {
		return false
	}
	rows, err := h.readAfter(ctx, cursors, unknown)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "sse hub: read announced events; streams read their own", slog.String("err", err.Error()))
		}
		for _, c := range cursors {
			for s := range h.byTask[c.Task] {
				wakeToRead(s)
			}
		}
		return false
	}
	for len(rows) > 0 {
		t := *rows[0].TaskID
		n := 1
		for n < len(rows) && *rows[n].TaskID == t {
			n++
		}
		h.deliver(t, rows[:n])
		if n == hubReadLimit {
			h.want[t] = struct{}{}
			again = true
		}
		rows = rows[n:]
	}
	return again
}

// readAfter reads the tasks' events after cursors, first reading the
// floors of the tasks in unknown (those of cursors without one) and keeping
// them while the tasks are followed.
func (h *Hub) readAfter(ctx context.Context, cursors []agentsql.TaskCursor, unknown []uuid.UUID) ([]agentsql.EventRow, error) {
	if len(unknown) > 0 {
		floors, err := agentsql.TaskEventFloors(ctx, h.pool, unknown)
		if err != nil {
			return nil, err
		}
		known := make(map[uuid.UUID]agentsql.EventFloor, len(unknown))
		h.mu.Lock()
		for i, t := range unknown {
			known[t] = floors[i]
			if h.byTask[t] != nil {
				h.floors[t] = floors[i]
			}
		}
		h.mu.Unlock()
		for i, c := range cursors {
			if f, ok := known[c.Task]; ok {
				cursors[i].Floor = f
			}
		}
	}
	return agentsql.TasksEventsAfter(ctx, h.pool, cursors, hubReadLimit)
}

// least is the least position of a task's subscribers that said theirs;
// h.mu is held.
func (h *Hub) least(task uuid.UUID) (after int, ok bool) {
	for s := range h.byTask[task] {
		if s.known && (!ok || s.pos < after) {
			after, ok = s.pos, true
		}
	}
	return after, ok
}

// deliver hands a task's rows (in seq order) to its subscribers; h.mu is
// held. One that subscribed during the read reads the table itself.
func (h *Hub) deliver(task uuid.UUID, rows []agentsql.EventRow) {
	last := *rows[len(rows)-1].Seq
	for s := range h.byTask[task] {
		if !s.known {
			wakeToRead(s)
			continue
		}
		s.pos = max(s.pos, last)
		s.mu.Lock()
		if len(s.rows)+len(rows) > subscriptionBuffer {
			s.rows, s.mustRead = nil, true
		} else {
			s.rows = append(s.rows, rows...)
		}
		s.mu.Unlock()
		wake(s)
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
	var loops sync.WaitGroup
	defer loops.Wait()
	loops.Go(func() { h.readLoop(ctx) })
	loops.Go(func() { h.sweepLoop(ctx) })
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
