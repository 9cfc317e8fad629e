package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// EventsChannel is the NOTIFY channel of agent_events. A notification names
// the tasks and projects that have new events, never content (Announcement).
// It is sent after the events committed: by the writing process's
// events.Announcer, or for plain SQL writers by a statement-level trigger.
const EventsChannel = "agent_events"

// Announcement is the payload of a notification on EventsChannel.
type Announcement struct {
	Tasks    []uuid.UUID `json:"tasks"`
	Projects []uuid.UUID `json:"projects"`
}

// AnnouncementBatch is the most task/project pairs one notification names,
// so that a payload stays under Postgres's 8000-byte limit.
const AnnouncementBatch = 100

// EventRow is one agent_events row.
type EventRow struct {
	ID        int64
	TaskID    *uuid.UUID
	ProjectID uuid.UUID
	Seq       *int
	Type      string
	Payload   json.RawMessage
	CreatedAt time.Time
}

// NewEvent is an event to append; seq is assigned by the database.
type NewEvent struct {
	Type    string
	Payload json.RawMessage
}

const eventColumns = `id, task_id, project_id, seq, type, payload, created_at`

func scanEvents(rows pgx.Rows) ([]EventRow, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventRow, error) {
		var e EventRow
		err := row.Scan(&e.ID, &e.TaskID, &e.ProjectID, &e.Seq, &e.Type, &e.Payload, &e.CreatedAt)
		return e, err
	})
}

// InsertEvents appends events to a task's timeline in one statement, in
// order, for a writer that does not hold the task (a tool, a test). The
// agent_events_assign_seq trigger gives each its seq under the task row lock,
// and the agent_events_announce trigger notifies in the transaction.
func InsertEvents(ctx context.Context, db DBTX, taskID, projectID uuid.UUID, evs []NewEvent) ([]EventRow, error) {
	return InsertEventBatch(ctx, db, EventBatch{TaskID: taskID, ProjectID: projectID, Events: evs})
}

// EventBatch is one write of a task's events.
type EventBatch struct {
	TaskID    uuid.UUID
	ProjectID uuid.UUID
	// Fence, when set, is the holder's fence epoch: the batch is written
	// only while it holds the task, or refused with ErrFenced.
	Fence *int64
	// Key, when set, is the batch's idempotency key: a batch sent again
	// (its first write committed, but the reply was lost) writes nothing
	// and returns no rows.
	Key    uuid.UUID
	Events []NewEvent
	// Since bounds the task's events from below (Claim.EventsSince): a
	// keyed batch looks for its key only in the days from there. Zero: in
	// every day.
	Since time.Time
	// UnlessPaused: a holder's batch (Fence set) is written only while no
	// pause is requested of the task; otherwise it writes nothing, which
	// its outcome reports as ErrFenced, so the caller reads the request
	// itself (SaveCheckpoint does, in the same transaction).
	UnlessPaused bool
	// AfterCommit: the statement does not notify; the caller announces the
	// task once its transaction committed (events.Announcer), so no task's
	// transaction takes Postgres's cluster-wide NOTIFY lock. Otherwise the
	// agent_events_announce trigger notifies in the transaction.
	AfterCommit bool
	// Next, when set, is a second batch the same statement writes after
	// this one, only while no pause is requested of the task (read by the
	// batch's fence update, under the task row lock it holds until the
	// commit): the start of a loop's next iteration, written with the
	// events of the one that ended without a statement of its own. For a
	// holder's batch never sent before: a batch that was written already
	// writes nothing, its Next included.
	Next *NextBatch
}

// NextBatch is the batch an EventBatch writes after its own (EventBatch.Next),
// with its own idempotency key.
type NextBatch struct {
	Key    uuid.UUID
	Events []NewEvent
}

// ErrNextAlone refuses a Next on a batch that does not hold the task, or
// has no events of its own: the statement that writes Next is the batch's.
var ErrNextAlone = errors.New("a next batch needs a holder's batch (Fence set) with events of its own")

// refused is why b cannot be written, if it cannot.
func (b EventBatch) refused() error {
	if b.Next != nil && (b.Fence == nil || len(b.Events) == 0) {
		return fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, ErrNextAlone)
	}
	return nil
}

// InsertEventBatch appends a batch of events to a task's timeline in one
// statement, in order, and returns the rows written, b.Next's after b's
// when it was written; a holder's (fenced) batch gets its rows completed
// from what it sent (scanBatch).
func InsertEventBatch(ctx context.Context, db DBTX, b EventBatch) ([]EventRow, error) {
	if err := b.refused(); err != nil {
		return nil, err
	}
	if len(b.Events) == 0 {
		return nil, nil
	}
	query, args := eventBatchStatement(b)
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, err)
	}
	out, err := scanBatch(rows, b)
	if err != nil {
		return nil, fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, err)
	}
	return eventBatchOutcome(ctx, db, b, out)
}

// QueueEventBatch queues InsertEventBatch's statement in p. Once p ran,
// outcome returns what InsertEventBatch would have: the rows written, none
// for a batch written before, or ErrFenced (it may ask db which).
func QueueEventBatch(p *Pipeline, b EventBatch) (outcome func(ctx context.Context, db DBTX) ([]EventRow, error)) {
	if err := b.refused(); err != nil {
		return func(context.Context, DBTX) ([]EventRow, error) { return nil, err }
	}
	if len(b.Events) == 0 {
		return func(context.Context, DBTX) ([]EventRow, error) { return nil, nil }
	}
	var out []EventRow
	query, args := eventBatchStatement(b)
	p.batch.Queue(query, args...).Query(func(rows pgx.Rows) error {
		var err error
		if out, err = scanBatch(rows, b); err != nil {
			return fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, err)
		}
		return nil
	})
	return func(ctx context.Context, db DBTX) ([]EventRow, error) { return eventBatchOutcome(ctx, db, b, out) }
}

// eventBatchStatement is the statement writing b, and its arguments.
func eventBatchStatement(b EventBatch) (string, []any) {
	all := b.withNext()
	types := make([]string, len(all))
	payloads := make([]string, len(all))
	for i, e := range all {
		types[i] = e.Type
		payloads[i] = string(JSONB(e.Payload))
	}
	// A writer that does not hold the task: the row trigger gives each
	// event its seq under the task row lock. Without a key the statement
	// names no read of agent_events: a cached generic plan locks every
	// partition a subquery names, even one a NULL key never runs (at 61
	// day partitions an insert took 2.4× an empty table's). With a key,
	// the read is bounded by b.Since's UTC day, written into the statement
	// as a constant: a parameter prunes only in custom plans, and Postgres
	// moves a prepared statement to a generic plan after five runs, which
	// locks every day. One statement per day of floors, cached like any.
	dedup := `$5::uuid IS NULL`
	if b.Key != uuid.Nil {
		dedup = `NOT EXISTS (SELECT 1 FROM agent_events WHERE task_id = $1 AND batch = $5` + sinceClause(b.Since) + `)`
	}
	query := `INSERT INTO agent_events (task_id, project_id, type, payload, batch)
		SELECT $1, $2, e.type, e.payload::jsonb, CASE WHEN e.ord = 1 THEN $5::uuid END
		FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS e(type, payload, ord)
		WHERE ` + dedup + `
		AND CASE WHEN $6 THEN set_config('agentworker.announce', 'after_commit', true) IS NOT NULL ELSE true END
		ORDER BY e.ord
		RETURNING ` + eventColumns
	args := []any{b.TaskID, b.ProjectID, types, payloads, keyArg(b.Key), b.AfterCommit}
	if b.Fence != nil {
		// The holder's batch takes its seqs here (the baseline's agent_events_assign_seq): the
		// update of the task row is the fence, the row lock and the seq
		// counter at once, whatever the batch's size. The arrays hold the
		// batch's $7 events, then Next's $11, written (and counted) only
		// while no pause is requested; Next's key marks its first row.
		query = `WITH fence AS (
				UPDATE ai_tasks SET last_seq = last_seq + $7 + CASE WHEN pause_requested THEN 0 ELSE $11 END
				WHERE id = $1 AND fence = $8 AND status = 'running' AND NOT (pause_requested AND $9)
				AND ` + dedup + `
				AND set_config('agentworker.seq', 'statement', true) IS NOT NULL
				RETURNING last_seq - $7 - CASE WHEN pause_requested THEN 0 ELSE $11 END AS base, pause_requested AS paused)
			INSERT INTO agent_events (task_id, project_id, seq, type, payload, batch)
			SELECT $1, $2, f.base + e.ord, e.type, e.payload::jsonb,
				CASE WHEN e.ord = 1 THEN $5::uuid WHEN e.ord = $7 + 1 THEN $10::uuid END
			FROM fence f, unnest($3::text[], $4::text[]) WITH ORDINALITY AS e(type, payload, ord)
			WHERE (e.ord <= $7 OR NOT f.paused)
			AND CASE WHEN $6 THEN set_config('agentworker.announce', 'after_commit', true) IS NOT NULL ELSE true END
			ORDER BY e.ord
			RETURNING ` + leanEventColumns
		var next NextBatch
		if b.Next != nil {
			next = *b.Next
		}
		args = append(args, len(b.Events), *b.Fence, b.UnlessPaused, keyArg(next.Key), len(next.Events))
	}
	return query, args
}

// keyArg is an idempotency key as a parameter: NULL, or the key as a
// uuid.UUID value (a *uuid.UUID would be sent through its driver.Valuer, see
// ConfigurePool).
func keyArg(key uuid.UUID) any {
	if key == uuid.Nil {
		return nil
	}
	return key
}

// sinceClause bounds created_at from below by since's UTC day (partitions
// are UTC days, so nothing prunes finer), as a constant: "" for no bound.
func sinceClause(since time.Time) string {
	if since.IsZero() {
		return ""
	}
	return ` AND created_at >= '` + since.UTC().Truncate(24*time.Hour).Format(time.RFC3339) + `'::timestamptz`
}

// withNext is the batch's events, then its Next's, as one statement
// sends them.
func (b EventBatch) withNext() []NewEvent {
	if b.Next == nil {
		return b.Events
	}
	return append(slices.Clip(b.Events), b.Next.Events...)
}

// leanEventColumns are what a holder's batch returns: the rest it sent
// (scanBatch), and sending every payload back would cost both sides the
// bytes again, for ~30 events of every build.
const leanEventColumns = `id, seq, created_at`

// scanBatch reads the rows writing b returned: whole rows for a writer
// that does not hold the task; for a holder's batch its ids, seqs and
// times, completed with what it sent (payloads as sent, equal as JSON to
// what is stored).
func scanBatch(rows pgx.Rows, b EventBatch) ([]EventRow, error) {
	if b.Fence == nil {
		return scanEvents(rows)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventRow, error) {
		e := EventRow{ProjectID: b.ProjectID}
		err := row.Scan(&e.ID, &e.Seq, &e.CreatedAt)
		return e, err
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	sent := b.Events
	if len(out) > len(b.Events) {
		sent = b.withNext()
	}
	if len(out) != len(sent) {
		return nil, fmt.Errorf("wrote %d of %d events", len(out), len(sent))
	}
	// Seqs are consecutive in the order sent.
	slices.SortFunc(out, func(x, y EventRow) int { return *x.Seq - *y.Seq })
	task := b.TaskID
	for i := range out {
		out[i].TaskID, out[i].Type, out[i].Payload = &task, sent[i].Type, JSONB(sent[i].Payload)
	}
	return out, nil
}

// eventBatchOutcome is what writing b returned: out, the rows written, or
// when a fenced batch wrote none, nothing (it was written before) or
// ErrFenced.
func eventBatchOutcome(ctx context.Context, db DBTX, b EventBatch, out []EventRow) ([]EventRow, error) {
	if len(out) > 0 || b.Fence == nil {
		return out, nil
	}
	// Nothing written: the batch was written before, or the fence is stale.
	if b.Key != uuid.Nil {
		var dup bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agent_events WHERE task_id = $1 AND batch = $2`+sinceClause(b.Since)+`)`,
			b.TaskID, b.Key).Scan(&dup); err != nil {
			return nil, fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, err)
		}
		if dup {
			return nil, nil
		}
	}
	return nil, fmt.Errorf("insert %d events for task %s: %w", len(b.Events), b.TaskID, ErrFenced)
}

// TaskEventsAfter returns a task's events with seq > afterSeq, in seq order.
// Per-task seq order is commit order (seq is taken under the task row lock),
// so a reader that advances its cursor to the last seq it saw never skips one.
// It reads the task's floor first; a reader that follows a task keeps it
// (TaskCursor) and reads with TasksEventsAfter.
func TaskEventsAfter(ctx context.Context, db DBTX, taskID uuid.UUID, afterSeq, limit int) ([]EventRow, error) {
	floors, err := TaskEventFloors(ctx, db, []uuid.UUID{taskID})
	if err != nil {
		return nil, fmt.Errorf("read events of task %s after seq %d: %w", taskID, afterSeq, err)
	}
	// Prepared: created_at >= $4 prunes at planning in a custom plan and
	// when the executor starts in a generic one (a parameter known then).
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM agent_events
		WHERE task_id = $1 AND seq > $2 AND created_at >= $4 ORDER BY seq LIMIT $3`,
		taskID, afterSeq, limit, floors[0].at)
	if err != nil {
		return nil, fmt.Errorf("read events of task %s after seq %d: %w", taskID, afterSeq, err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read events of task %s after seq %d: %w", taskID, afterSeq, err)
	}
	return out, nil
}

// TaskCursor is a position in one task's timeline: the last seq read, and
// the task's event floor once known.
type TaskCursor struct {
	Task     uuid.UUID
	AfterSeq int
	// Floor is the task's (TaskEventFloors); unknown (the zero value), the
	// read looks it up, one statement more.
	Floor EventFloor
}

// TasksEventsAfter reads the events of several tasks after their cursors in
// one statement: at most limit per task, ordered by task (as given) then
// seq. A task that gets limit rows may have more. The read plans (or runs)
// only the days from the least of the cursors' floors.
func TasksEventsAfter(ctx context.Context, db DBTX, cursors []TaskCursor, limit int) ([]EventRow, error) {
	if len(cursors) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(cursors))
	after := make([]int32, len(cursors))
	var floor EventFloor
	var unknown []uuid.UUID
	for i, c := range cursors {
		ids[i], after[i] = c.Task, int32(c.AfterSeq)
		if c.Floor.Known() {
			floor = floor.lower(c.Floor)
		} else {
			unknown = append(unknown, c.Task)
		}
	}
	if len(unknown) > 0 {
		floors, err := TaskEventFloors(ctx, db, unknown)
		if err != nil {
			return nil, fmt.Errorf("read events of %d tasks: %w", len(cursors), err)
		}
		for _, f := range floors {
			floor = floor.lower(f)
		}
	}
	// Prepared, as TaskEventsAfter: one floor for all, so that it is a
	// parameter ($4) and not a value of each task's row, which would prune
	// only while each row's scan runs, every day planned and set up.
	rows, err := db.Query(ctx, `SELECT e.id, e.task_id, e.project_id, e.seq, e.type, e.payload, e.created_at
		FROM unnest($1::uuid[], $2::int[]) WITH ORDINALITY AS c(task_id, after_seq, n)
		CROSS JOIN LATERAL (SELECT `+eventColumns+` FROM agent_events
			WHERE task_id = c.task_id AND seq > c.after_seq AND created_at >= $4 ORDER BY seq LIMIT $3) e
		ORDER BY c.n, e.seq`, ids, after, limit, floor.at)
	if err != nil {
		return nil, fmt.Errorf("read events of %d tasks: %w", len(cursors), err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read events of %d tasks: %w", len(cursors), err)
	}
	return out, nil
}

// ProjectCursor is a position in a project's event stream: the event with
// the greatest (Xid, ID) delivered so far. The zero value is the start.
type ProjectCursor struct {
	Xid int64 // the writing transaction's id (agent_events.xid)
	ID  int64
}

// ProjectEventRow is an event of a project's stream with its cursor.
type ProjectEventRow struct {
	EventRow
	Cursor ProjectCursor
}

// ProjectEventsAfter returns a project's events after cur in commit-safe
// order, and held: whether events of the project exist that are not yet
// deliverable because a transaction older than theirs is still running.
//
// Rows are ordered by (xid, id) and only those whose xid is below the xmin
// of the statement's snapshot are returned. Every transaction with an xid
// below xmin has finished, so once an event with xid x is returned, no event
// with a smaller xid can commit later: a reader that keeps the last cursor it
// saw never skips an event, however transactions interleave. The price is
// that a long-running transaction anywhere in the cluster delays project
// streams (not task streams) until it ends.
func ProjectEventsAfter(ctx context.Context, db DBTX, projectID uuid.UUID, cur ProjectCursor, limit int) (rows []ProjectEventRow, held bool, err error) {
	return ProjectEventsAfterFloor(ctx, db, projectID, cur, EventFloor{}, limit)
}

// ProjectEventFloor is no later than the created_at of every event a
// project stream can read after cur (every such event has a greater xid).
// Seals only add up and a stream's cursor only moves on, so a floor read
// once bounds the stream's later reads too: a stream keeps it rather than
// reading it again (ProjectEventsAfterFloor).
func ProjectEventFloor(ctx context.Context, db DBTX, cur ProjectCursor) (EventFloor, error) {
	at, err := eventFloor(ctx, db, &cur.Xid, nil)
	if err != nil {
		return EventFloor{}, err
	}
	return EventFloor{at: at}, nil
}

// ProjectEventsAfterFloor is ProjectEventsAfter bounded by floor, the
// ProjectEventFloor of cur or of an earlier cursor of the stream; unknown
// (the zero value), the read looks it up, one statement more.
func ProjectEventsAfterFloor(ctx context.Context, db DBTX, projectID uuid.UUID, cur ProjectCursor, floor EventFloor, limit int) (rows []ProjectEventRow, held bool, err error) {
	// One statement, so the rows and held see the same snapshot: with two,
	// xmin could advance in between and hide rows without reporting them held.
	// Both parts read the (project_id, xid, id) index a few entries deep:
	// the rows are ordered by the stored xid, not by its bigint output, so
	// the read stops after limit rows instead of sorting all the project's
	// later events; held compares the project's newest xid with xmin. Asked
	// as "does a row with xid >= xmin exist", Postgres scanned the table
	// expecting to meet one early, while held rows are the newest, at its
	// end.
	//
	// Every row after cur, and every held row (its xid is at least xmin,
	// above cur's), has an xid above cur's: none is older than the floor of
	// cur's xid, which names the days to plan (eventFloor).
	if !floor.Known() {
		if floor, err = ProjectEventFloor(ctx, db, cur); err != nil {
			return nil, false, fmt.Errorf("read events of project %s after %d/%d: %w", projectID, cur.Xid, cur.ID, err)
		}
	}
	// Unprepared (planned with its values, pruned at planning): a stream's
	// first reads from the start plan every day alike, which makes Postgres
	// keep a prepared statement's generic plan, and on PostgreSQL 15 a
	// generic plan locks every day however many the executor prunes.
	r, err := db.Query(ctx, `SELECT e.id, e.task_id, e.project_id, e.seq, e.type, e.payload, e.created_at, e.xid, h.held
		FROM (SELECT coalesce((SELECT xid FROM agent_events WHERE project_id = $1 AND created_at >= $5 ORDER BY xid DESC LIMIT 1)
		        >= pg_snapshot_xmin(pg_current_snapshot()), false) AS held) h
		LEFT JOIN LATERAL (
		    SELECT `+eventColumns+`, xid::text::bigint AS xid FROM agent_events
		    WHERE project_id = $1 AND created_at >= $5
		      AND (xid, id) > ($2::bigint::text::xid8, $3)
		      AND xid < pg_snapshot_xmin(pg_current_snapshot())
		    ORDER BY agent_events.xid, agent_events.id LIMIT $4) e ON true
		ORDER BY e.xid, e.id`, pgx.QueryExecModeCacheDescribe, projectID, cur.Xid, cur.ID, limit, floor.at)
	if err != nil {
		return nil, false, fmt.Errorf("read events of project %s after %d/%d: %w", projectID, cur.Xid, cur.ID, err)
	}
	defer r.Close()
	for r.Next() {
		var (
			id, xid   *int64
			pid       *uuid.UUID
			typ       *string
			createdAt *time.Time
			e         ProjectEventRow
		)
		if err := r.Scan(&id, &e.TaskID, &pid, &e.Seq, &typ, &e.Payload, &createdAt, &xid, &held); err != nil {
			return nil, false, fmt.Errorf("read events of project %s: %w", projectID, err)
		}
		if id == nil { // no event: the row carries only held
			continue
		}
		e.ID, e.ProjectID, e.Type, e.CreatedAt = *id, *pid, *typ, *createdAt
		e.Cursor = ProjectCursor{Xid: *xid, ID: *id}
		rows = append(rows, e)
	}
	if err := r.Err(); err != nil {
		return nil, false, fmt.Errorf("read events of project %s after %d/%d: %w", projectID, cur.Xid, cur.ID, err)
	}
	return rows, held, nil
}

// eventFloor is the earliest created_at an event with an xid above *xid,
// or with the id *id, can have (agentworker_event_floor; both nil: the
// oldest day not sealed), possibly -infinity. A statement bounded by it
// (created_at >= floor) must run unprepared
// (pgx.QueryExecModeCacheDescribe: an unnamed statement, planned with its
// values): a cached generic plan would plan and lock every partition, the
// bound known only when it runs.
func eventFloor(ctx context.Context, db DBTX, xid, id *int64) (pgtype.Timestamptz, error) {
	var floor pgtype.Timestamptz
	if err := db.QueryRow(ctx, `SELECT agentworker_event_floor($1::bigint::text::xid8, $2)`, xid, id).Scan(&floor); err != nil {
		after := "the newest seal"
		if xid != nil {
			after = fmt.Sprintf("xid %d", *xid)
		} else if id != nil {
			after = fmt.Sprintf("id %d", *id)
		}
		return floor, fmt.Errorf("floor of events after %s: %w", after, err)
	}
	return floor, nil
}

// EventFloor is no later than the created_at of every event of a task: the
// floor (agentworker_event_floor) of the lowest id its events are above
// (ai_tasks.events_id_floor, set on insert and never changed). A read
// bounded by it (created_at >= floor) skips the days sealed below the
// task's events. Seals only add up, so a floor once read bounds the task's
// events for good: a reader that follows a task keeps it rather than
// reading it again. The zero value is unknown.
type EventFloor struct{ at pgtype.Timestamptz }

// Known reports whether f was read.
func (f EventFloor) Known() bool { return f.at.Valid }

// lower returns the earlier of f and g, or g when f is unknown.
func (f EventFloor) lower(g EventFloor) EventFloor {
	switch {
	case !f.Known(), g.at.InfinityModifier == pgtype.NegativeInfinity:
		return g
	case f.at.InfinityModifier == pgtype.NegativeInfinity, !g.at.Time.Before(f.at.Time):
		return f
	}
	return g
}

// TaskEventFloors reads the event floors of tasks, in their order. A task
// without an id floor (from before the column) or not found gets none: a
// read bounded by it reads every day.
func TaskEventFloors(ctx context.Context, db DBTX, tasks []uuid.UUID) ([]EventFloor, error) {
	rows, err := db.Query(ctx, `SELECT CASE WHEN t.events_id_floor IS NULL THEN '-infinity'::timestamptz
			ELSE agentworker_event_floor(NULL, t.events_id_floor + 1) END
		FROM unnest($1::uuid[]) WITH ORDINALITY AS c(id, n) LEFT JOIN ai_tasks t ON t.id = c.id
		ORDER BY c.n`, tasks)
	if err != nil {
		return nil, fmt.Errorf("floors of the events of %d tasks: %w", len(tasks), err)
	}
	floors, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventFloor, error) {
		var f EventFloor
		return f, row.Scan(&f.at)
	})
	if err != nil {
		return nil, fmt.Errorf("floors of the events of %d tasks: %w", len(tasks), err)
	}
	return floors, nil
}

// EventCursor returns the project cursor of the event with the given id, for
// clients that resume a project stream from a plain event id.
func EventCursor(ctx context.Context, db DBTX, projectID uuid.UUID, id int64) (ProjectCursor, error) {
	cur := ProjectCursor{ID: id}
	floor, err := eventFloor(ctx, db, nil, &id)
	if err != nil {
		return cur, fmt.Errorf("cursor of event %d in project %s: %w", id, projectID, err)
	}
	err = db.QueryRow(ctx, `SELECT xid::text::bigint FROM agent_events WHERE id = $1 AND project_id = $2 AND created_at >= $3`,
		pgx.QueryExecModeCacheDescribe, id, projectID, floor).Scan(&cur.Xid)
	if errors.Is(err, pgx.ErrNoRows) {
		return cur, fmt.Errorf("cursor of event %d in project %s: %w", id, projectID, ErrEventNotFound)
	}
	if err != nil {
		return cur, fmt.Errorf("cursor of event %d in project %s: %w", id, projectID, err)
	}
	return cur, nil
}

// ErrEventNotFound reports that no agent_events row has the given id.
var ErrEventNotFound = errors.New("event not found")

// EventKey is a task and its project.
type EventKey struct {
	Task, Project uuid.UUID
}

// EventsSince returns the tasks (with their projects) that have events with
// an id above afterID, and the highest id among them (afterID when none). An
// afterID below 0 asks only for the highest id of the table.
func EventsSince(ctx context.Context, db DBTX, afterID int64) ([]EventKey, int64, error) {
	if afterID < 0 {
		var top int64
		if err := db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM agent_events`).Scan(&top); err != nil {
			return nil, 0, fmt.Errorf("read the newest event id: %w", err)
		}
		return nil, top, nil
	}
	// One statement (the hub sweeps every 200 ms) that plans only the days
	// not sealed below afterID+1.
	rows, err := db.Query(ctx, `SELECT task_id, project_id, top FROM agentworker_events_since($1)`, afterID)
	if err != nil {
		return nil, 0, fmt.Errorf("read the tasks with events after id %d: %w", afterID, err)
	}
	defer rows.Close()
	var keys []EventKey
	top := afterID
	for rows.Next() {
		var k EventKey
		var id int64
		if err := rows.Scan(&k.Task, &k.Project, &id); err != nil {
			return nil, 0, fmt.Errorf("read the tasks with events after id %d: %w", afterID, err)
		}
		keys = append(keys, k)
		top = max(top, id)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read the tasks with events after id %d: %w", afterID, err)
	}
	return keys, top, nil
}
