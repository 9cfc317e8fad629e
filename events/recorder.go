package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
)

// DefaultStreamInterval bounds how often stream_delta events are written per
// task: deltas arriving faster are coalesced into one event.
const DefaultStreamInterval = 250 * time.Millisecond

// Recorder appends the events of one task. It is safe for concurrent use.
type Recorder struct {
	db        agentsql.DBTX
	taskID    uuid.UUID
	projectID uuid.UUID
	now       func() time.Time
	interval  time.Duration

	observer  Observer
	announcer *Announcer
	fence     *int64    // the holder's fence epoch; nil: unfenced
	since     time.Time // no event of the task is older (sql.Claim.EventsSince)

	// writeMu is held while a statement is in flight, so writes happen one
	// at a time in the order they were asked for (seq follows that order).
	// FlushAsync's goroutine releases it when its write is done.
	writeMu sync.Mutex

	mu       sync.Mutex
	buffered []Payload // events added but not yet written
	// unsure are batches whose write failed or whose transaction did not
	// commit: they are written first by the next write, with their keys,
	// so a batch that did commit is not written twice.
	unsure []batch
	// tx, while InTx runs, is its transaction, and inTx the batches
	// written in it.
	tx         agentsql.DBTX
	inTx       []batch
	fencedAt   error           // set once a write was refused: the holder stops
	pending    strings.Builder // stream deltas not yet written
	pendingID  string
	streamSeq  int
	lastFlush  time.Time
	totalBytes int
	// unannounced: events were written in a transaction not yet known
	// to have committed (Committed announces them).
	unannounced bool
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// WithClock sets the Recorder's clock, which stamps progress events and
// paces stream deltas. Defaults to time.Now.
func WithClock(now func() time.Time) RecorderOption {
	return func(r *Recorder) { r.now = now }
}

// WithStreamInterval sets the least time between two stream_delta events
// of a task. Defaults to DefaultStreamInterval.
func WithStreamInterval(d time.Duration) RecorderOption {
	return func(r *Recorder) { r.interval = d }
}

// WithAnnouncer makes the Recorder's writes not notify in their own
// transaction: a write through a pool is announced by a at once, a write
// through a transaction when the caller says it committed (Committed).
// Without it (or with a nil a), the database's trigger notifies inside the
// writing transaction, which serialises every writer's commit on one lock.
func WithAnnouncer(a *Announcer) RecorderOption {
	return func(r *Recorder) { r.announcer = a }
}

// WithFence makes every write carry the holder's fence epoch (see
// sql.Fence): once the task is claimed again, taken over, cancelled or
// finished, writes are refused with sql.ErrFenced, and every later write
// too, without asking the database again.
func WithFence(epoch int64) RecorderOption {
	return func(r *Recorder) { r.fence = &epoch }
}

// WithEventsSince tells the Recorder that no event of its task is older
// than since (sql.Claim.EventsSince): a write's idempotency check then
// reads only the days from there, not every day the table keeps.
func WithEventsSince(since time.Time) RecorderOption {
	return func(r *Recorder) { r.since = since }
}

// batch is one write of events with its idempotency key.
type batch struct {
	key uuid.UUID
	ps  []Payload
}

// NewRecorder returns a Recorder for one task's timeline.
func NewRecorder(db agentsql.DBTX, taskID, projectID uuid.UUID, opts ...RecorderOption) *Recorder {
	r := &Recorder{db: db, taskID: taskID, projectID: projectID, now: time.Now, interval: DefaultStreamInterval}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Observer sees every payload a Recorder has written (metrics count LLM
// calls, tokens and tool calls from them).
type Observer interface {
	Observe(p Payload)
}

// SetObserver makes o see every payload written from now on. Call it before
// the Recorder is shared.
func (r *Recorder) SetObserver(o Observer) { r.observer = o }

// Add queues payloads to be written by the next Emit or Flush, in order.
// A runner adds what happens between two waits (an LLM call, a tool) and
// flushes before it waits: one statement instead of one per event, with the
// same order and no event later than the wait it precedes.
func (r *Recorder) Add(ps ...Payload) {
	r.mu.Lock()
	for _, p := range ps {
		r.buffered = append(r.buffered, r.stamp(p))
	}
	r.mu.Unlock()
}

// stamp sets a progress event's timestamp to when it happened.
func (r *Recorder) stamp(p Payload) Payload {
	if pr, ok := p.(Progress); ok && pr.Timestamp.IsZero() {
		pr.Timestamp = r.now().UTC()
		return pr
	}
	return p
}

// Flush writes the queued payloads in one statement.
func (r *Recorder) Flush(ctx context.Context) ([]Event, error) {
	return r.Emit(ctx)
}

// Emit writes the queued payloads, then ps, in order, in one statement.
func (r *Recorder) Emit(ctx context.Context, ps ...Payload) ([]Event, error) {
	return r.EmitIn(ctx, r.db, ps...)
}

// EmitIn is Emit through db, a transaction that writes what belongs with
// the events (a loop's checkpoint). Should the transaction roll back after
// the statement succeeded, its events are lost with it.
func (r *Recorder) EmitIn(ctx context.Context, db agentsql.DBTX, ps ...Payload) ([]Event, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	ps = r.takeBuffered(ps)
	if len(ps) == 0 && !r.hasUnsure() {
		return nil, nil
	}
	return r.insert(ctx, db, ps)
}

// FlushAsync starts writing the queued payloads and returns at once: a
// runner flushes before a long wait (an LLM call) and the write overlaps it.
// The next write waits for this one; if it failed, its payloads are queued
// again and that write carries them, or returns the error.
func (r *Recorder) FlushAsync(ctx context.Context) {
	r.writeMu.Lock()
	ps := r.takeBuffered(nil)
	if len(ps) == 0 && !r.hasUnsure() {
		r.writeMu.Unlock()
		return
	}
	go func() {
		defer r.writeMu.Unlock()
		_, _ = r.insert(ctx, r.db, ps) // on failure insert queues ps again
	}()
}

// hasUnsure reports batches waiting to be written again.
func (r *Recorder) hasUnsure() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.unsure) > 0
}

// takeBuffered returns the queued payloads followed by ps, and empties the queue.
func (r *Recorder) takeBuffered(ps []Payload) []Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buffered) > 0 {
		ps = append(r.buffered, ps...)
		r.buffered = nil
	}
	return ps
}

// insert writes the batches not known to be written, then ps as a new
// batch; the caller holds writeMu.
func (r *Recorder) insert(ctx context.Context, db agentsql.DBTX, ps []Payload) ([]Event, error) {
	todo, err := r.due(ps)
	if err != nil {
		return nil, err
	}
	var out []Event
	for i, b := range todo {
		evs, err := r.write(ctx, db, b)
		if err != nil {
			r.keep(todo[i:], err)
			return out, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

// due takes the batches not known to be written, then ps as a new batch;
// once the holder was fenced, it refuses. The caller holds writeMu.
func (r *Recorder) due(ps []Payload) ([]batch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	todo := r.unsure
	r.unsure = nil
	if err := r.fencedAt; err != nil {
		return nil, err
	}
	if len(ps) > 0 {
		todo = append(todo, batch{key: uuid.New(), ps: ps})
	}
	return todo, nil
}

// keep queues batches whose write failed, or may not have committed, for
// the next write (the failure path records an error event): a timeline
// may be late, never missing events nor holding one twice.
func (r *Recorder) keep(bs []batch, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsure = append(bs, r.unsure...)
	if errors.Is(err, agentsql.ErrFenced) {
		r.fencedAt = err
	}
}

// eventBatch encodes one batch for the database.
func (r *Recorder) eventBatch(b batch) (agentsql.EventBatch, error) {
	evs := make([]agentsql.NewEvent, len(b.ps))
	for i, p := range b.ps {
		p = r.stamp(p)
		body, err := json.Marshal(p)
		if err != nil {
			return agentsql.EventBatch{}, fmt.Errorf("encode %s event for task %s: %w", p.EventType(), r.taskID, err)
		}
		// Secrets never reach the timeline, whatever the payload carries.
		evs[i] = agentsql.NewEvent{Type: string(p.EventType()), Payload: redact.JSON(body)}
	}
	return agentsql.EventBatch{TaskID: r.taskID, ProjectID: r.projectID, Fence: r.fence, Key: b.key, Events: evs,
		Since: r.since, AfterCommit: r.announcer != nil}, nil
}

// write writes one batch.
func (r *Recorder) write(ctx context.Context, db agentsql.DBTX, b batch) ([]Event, error) {
	eb, err := r.eventBatch(b)
	if err != nil {
		return nil, err
	}
	rows, err := agentsql.InsertEventBatch(ctx, db, eb)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.tx != nil && db == r.tx {
		r.inTx = append(r.inTx, b)
	}
	r.mu.Unlock()
	if r.announcer != nil {
		if _, inTx := db.(pgx.Tx); inTx {
			r.mu.Lock()
			r.unannounced = true
			r.mu.Unlock()
		} else {
			r.announcer.Announce(r.taskID, r.projectID)
		}
	}
	return r.written(b, rows), nil
}

// written reports a batch's payloads to the observer and returns its rows
// as events.
func (r *Recorder) written(b batch, rows []agentsql.EventRow) []Event {
	if r.observer != nil {
		for _, p := range b.ps {
			r.observer.Observe(p)
		}
	}
	out := make([]Event, len(rows))
	for i, row := range rows {
		out[i] = FromRow(row)
	}
	return out
}

// Pipeliner is where InPipeline sends its round trip and asks what became
// of a batch that wrote nothing: a pool, or a connection.
type Pipeliner interface {
	agentsql.Batcher
	agentsql.DBTX
}

// InPipeline writes the queued payloads, then ps, in one round trip with
// the statements queue adds (sql.Pipeline): one implicit transaction, the
// events first, so they are in before a statement that ends the task. It
// is InTx without BEGIN and COMMIT, for writes whose arguments do not
// depend on each other's results. Should the pipeline not commit, or its
// outcome be unknown, its batches are queued again, with their idempotency
// keys, for the next write; once it committed, they are announced.
func (r *Recorder) InPipeline(ctx context.Context, db Pipeliner, queue func(p *agentsql.Pipeline) error, ps ...Payload) ([]Event, error) {
	_, out, err := r.InPipelineUnpaused(ctx, db, queue, Unpaused{}, ps...)
	return out, err
}

// Unpaused is a batch a pipeline writes after its other events, only while
// no pause is requested of the task: the start of a loop's next iteration,
// sent with the checkpoint that reads the request, saves the iteration a
// round trip and a commit of its own. The statements the pipeline's queue
// adds must leave the task running and write no events of their own: the
// batch may be written by the statement of the pipeline's own events,
// before them.
type Unpaused struct {
	Payloads []Payload
	// Paused reports, once the pipeline ran, whether a pause was
	// requested: a statement of the pipeline read it, under the task row
	// lock the pipeline holds until its commit.
	Paused func() bool
}

// InPipelineUnpaused is InPipeline with next written after its events,
// unless a pause was requested; written reports whether it was. Should the pipeline fail,
// next is not queued again: it belongs with the statements that did not
// commit, and the caller, which returns the error, never starts what it
// announces.
func (r *Recorder) InPipelineUnpaused(ctx context.Context, db Pipeliner, queue func(p *agentsql.Pipeline) error, next Unpaused, ps ...Payload) (written bool, _ []Event, _ error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	ps = r.takeBuffered(ps)
	todo, err := r.due(ps)
	if err != nil {
		return false, nil, err
	}
	var unpaused *batch
	if len(next.Payloads) > 0 {
		unpaused = &batch{key: uuid.New(), ps: next.Payloads}
	}
	// The last batch is new when ps is not empty (due appends it): never
	// sent, so next can ride in its statement (sql.EventBatch.Next).
	out, written, err := r.pipeline(ctx, db, todo, len(ps) > 0, queue, unpaused, next.Paused)
	if err != nil {
		r.keep(todo, err)
		return false, nil, err
	}
	if r.announcer != nil && (len(todo) > 0 || written) {
		r.announcer.Announce(r.taskID, r.projectID)
	}
	return written, out, nil
}

// pipeline writes todo, the statements queue adds, and unpaused unless a
// pause was requested. When todo's last batch is new (lastNew), unpaused
// is written by that batch's statement, which reads the request under the
// row lock the pipeline then holds: one statement and one update of the
// task row fewer. Otherwise it is a statement of its own, after queue's.
func (r *Recorder) pipeline(ctx context.Context, db Pipeliner, todo []batch, lastNew bool, queue func(p *agentsql.Pipeline) error,
	unpaused *batch, paused func() bool) (_ []Event, written bool, _ error) {
	var p agentsql.Pipeline
	ebs := make([]agentsql.EventBatch, len(todo))
	for i, b := range todo {
		eb, err := r.eventBatch(b)
		if err != nil {
			return nil, false, err
		}
		ebs[i] = eb
	}
	var next agentsql.EventBatch
	if unpaused != nil {
		var err error
		if next, err = r.eventBatch(*unpaused); err != nil {
			return nil, false, err
		}
	}
	merged := unpaused != nil && lastNew && r.fence != nil // lastNew: todo ends with that batch
	if merged {
		ebs[len(ebs)-1].Next = &agentsql.NextBatch{Key: next.Key, Events: next.Events}
	}
	outcomes := make([]func(context.Context, agentsql.DBTX) ([]agentsql.EventRow, error), len(todo))
	for i, eb := range ebs {
		outcomes[i] = agentsql.QueueEventBatch(&p, eb)
	}
	if err := queue(&p); err != nil {
		return nil, false, err
	}
	var last func(context.Context, agentsql.DBTX) ([]agentsql.EventRow, error)
	if unpaused != nil && !merged {
		next.UnlessPaused = true
		last = agentsql.QueueEventBatch(&p, next)
	}
	if err := p.Run(ctx, db); err != nil {
		return nil, false, err
	}
	var out []Event
	for i, b := range todo {
		rows, err := outcomes[i](ctx, db)
		if err != nil {
			return nil, false, err
		}
		if merged && i == len(todo)-1 {
			// The batch's rows, then next's when no pause was requested.
			n := min(len(b.ps), len(rows))
			out = append(out, r.written(b, rows[:n])...)
			if written = len(rows) > n; written {
				out = append(out, r.written(*unpaused, rows[n:])...)
			}
			continue
		}
		out = append(out, r.written(b, rows)...)
	}
	if last == nil || (paused != nil && paused()) {
		return out, written, nil
	}
	rows, err := last(ctx, db)
	if err != nil {
		return nil, false, err
	}
	return append(out, r.written(*unpaused, rows)...), true, nil
}

// Committed announces the events the Recorder wrote in a transaction (its
// own db, or EmitIn's) once the caller has committed it. Calling it after a
// rollback costs listeners one read that finds nothing. A nil Recorder does
// nothing.
func (r *Recorder) Committed() {
	if r == nil { // the transaction never began
		return
	}
	r.mu.Lock()
	due := r.unannounced
	r.unannounced = false
	r.mu.Unlock()
	if due && r.announcer != nil {
		r.announcer.Announce(r.taskID, r.projectID)
	}
}

// InTx runs fn in a transaction of db; fn writes the events that belong
// with its other writes through EmitIn(ctx, tx, ...). Should the
// transaction not commit, the events written in it are queued again, with
// their idempotency keys, for the next write: they are neither lost with a
// rollback nor written twice when only the commit's reply was lost. Once it
// committed, they are announced (Committed).
func (r *Recorder) InTx(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(tx pgx.Tx) error) error {
	var tx pgx.Tx
	err := pgx.BeginFunc(ctx, db, func(t pgx.Tx) error {
		tx = t
		r.mu.Lock()
		r.tx, r.inTx = t, nil
		r.mu.Unlock()
		return fn(t)
	})
	r.mu.Lock()
	if tx != nil && r.tx == tx {
		if err != nil && len(r.inTx) > 0 {
			r.unsure = append(r.inTx, r.unsure...)
		}
		r.tx, r.inTx = nil, nil
	}
	r.mu.Unlock()
	if err == nil {
		r.Committed()
	}
	return err
}

// StreamDelta buffers a fragment of streamed model output and writes a
// stream_delta event when the stream interval has passed since the last
// one, so a task writes a few events per second, not one per token.
func (r *Recorder) StreamDelta(ctx context.Context, messageID, delta string) error {
	r.mu.Lock()
	if r.pendingID != messageID {
		r.pendingID, r.streamSeq, r.totalBytes = messageID, 0, 0
		r.pending.Reset()
	}
	r.pending.WriteString(delta)
	r.totalBytes += len(delta)
	due := r.now().Sub(r.lastFlush) >= r.interval
	r.mu.Unlock()
	if !due {
		return nil
	}
	return r.flushStream(ctx)
}

// StreamComplete writes any buffered delta, then one stream_complete event
// carrying the whole text.
func (r *Recorder) StreamComplete(ctx context.Context, messageID, content string) error {
	if err := r.flushStream(ctx); err != nil {
		return err
	}
	_, err := r.Emit(ctx, Progress{Kind: KindStreamComplete, MessageID: messageID, Content: content, TotalLength: len(content)})
	return err
}

func (r *Recorder) flushStream(ctx context.Context) error {
	r.mu.Lock()
	if r.pending.Len() == 0 {
		r.mu.Unlock()
		return nil
	}
	r.streamSeq++
	p := Progress{Kind: KindStreamDelta, MessageID: r.pendingID, Delta: r.pending.String(), Seq: r.streamSeq, TotalLength: r.totalBytes}
	r.pending.Reset()
	r.lastFlush = r.now()
	r.mu.Unlock()
	_, err := r.Emit(ctx, p)
	return err
}

// FromRow converts a stored agent_events row to an Event.
func FromRow(row agentsql.EventRow) Event {
	e := Event{ID: row.ID, ProjectID: row.ProjectID, Type: Type(row.Type), Payload: row.Payload, CreatedAt: row.CreatedAt}
	if row.TaskID != nil {
		e.TaskID = *row.TaskID
	}
	if row.Seq != nil {
		e.Seq = *row.Seq
	}
	return e
}
