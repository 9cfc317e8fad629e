package sql_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestEventsAcrossPartitions: a task's events written on days with a
// partition and on a day with none (the default partition) keep one
// per-task order, seq 1…n without a gap or a repeat; reading the timeline,
// the project stream and PostgREST's computed relationship see them all;
// the leader's pass later moves the default partition's rows into their
// day's partition, ids and seqs unchanged.
func TestEventsAcrossPartitions(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task := insertTaskIn(t, pool, agentsql.StatusQueued)
	var project uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT project_id FROM ai_tasks WHERE id = $1`, task).Scan(&project); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	far := today.AddDate(0, 0, 40) // no partition is made this far ahead
	var where []string
	for _, at := range []time.Time{today.Add(time.Hour), far.Add(time.Hour), today.AddDate(0, 0, 1).Add(time.Hour), far.Add(2 * time.Hour)} {
		var part string
		if err := pool.QueryRow(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload, created_at)
			VALUES ($1, $2, 'log', '{"message": "x"}', $3) RETURNING tableoid::regclass::text`, task, project, at).Scan(&part); err != nil {
			t.Fatalf("insert an event at %s: %v", at, err)
		}
		where = append(where, part)
	}
	want := []string{"agent_events_p" + today.Format("20060102"), "agent_events_default",
		"agent_events_p" + today.AddDate(0, 0, 1).Format("20060102"), "agent_events_default"}
	if !slices.Equal(where, want) {
		t.Errorf("events landed in %v, want %v", where, want)
	}

	type key struct {
		ID  int64
		Seq int
	}
	read := func() []key {
		t.Helper()
		evs, err := agentsql.TaskEventsAfter(ctx, pool, task, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ks []key
		for _, e := range evs {
			ks = append(ks, key{e.ID, *e.Seq})
		}
		return ks
	}
	before := read()
	if len(before) != 4 {
		t.Fatalf("timeline = %v, want 4 events", before)
	}
	for i, k := range before {
		if k.Seq != i+1 {
			t.Errorf("timeline = %v, want seqs 1…4 in order", before)
			break
		}
	}
	var lastSeq int
	if err := pool.QueryRow(ctx, `SELECT last_seq FROM ai_tasks WHERE id = $1`, task).Scan(&lastSeq); err != nil || lastSeq != 4 {
		t.Errorf("ai_tasks.last_seq = %d (%v), want 4", lastSeq, err)
	}
	// The project stream delivers below the cluster's xmin: another
	// database's open transaction may hold it back a moment.
	poll.Until(t, "the project stream reads the 4 events", 30*time.Second, func() bool {
		rows, _, err := agentsql.ProjectEventsAfter(ctx, pool, project, agentsql.ProjectCursor{}, 100)
		return err == nil && len(rows) == 4
	})
	var embedded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events((SELECT t FROM ai_tasks t WHERE id = $1))`, task).Scan(&embedded); err != nil || embedded != 4 {
		t.Errorf("agent_events(ai_tasks) = %d (%v), want 4", embedded, err)
	}

	made, err := agentsql.PrepareEventPartitions(ctx, pool, 3)
	if err != nil || made != 1 {
		t.Fatalf("PrepareEventPartitions = %d, %v; want the far day's partition made", made, err)
	}
	var inDefault int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events_default`).Scan(&inDefault); err != nil || inDefault != 0 {
		t.Errorf("agent_events_default holds %d rows (%v) after the pass, want 0", inDefault, err)
	}
	if after := read(); !slices.Equal(after, before) {
		t.Errorf("after the move the timeline is %v, want %v", after, before)
	}
	// The seq stays unique per task across partitions: the next event
	// takes 5 whatever day it lands on.
	evs, err := agentsql.InsertEvents(ctx, pool, task, project, []agentsql.NewEvent{{Type: "log", Payload: json.RawMessage(`{"message":"y"}`)}})
	if err != nil || *evs[0].Seq != 5 {
		t.Errorf("next event: %+v, %v; want seq 5", evs, err)
	}
}

// TestEventInsertAnnouncedFromPartitionedTable: a plain SQL insert into the
// partitioned table is still announced by the statement trigger, once, with
// its task and project.
func TestEventInsertAnnouncedFromPartitionedTable(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task := insertTaskIn(t, pool, agentsql.StatusQueued)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, created_at)
		SELECT id, project_id, 'log', now() + g * interval '1 day' FROM ai_tasks, generate_series(0, 1) g WHERE id = $1`, task); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no announcement: %v", err)
	}
	var a agentsql.Announcement
	if err := json.Unmarshal([]byte(n.Payload), &a); err != nil || !slices.Equal(a.Tasks, []uuid.UUID{task}) {
		t.Errorf("announcement %s (%v), want task %s", n.Payload, err, task)
	}
}

// TestFinishedChangeSetKeepsOnlyTheDiff: once a build's change set is
// applied, its entries keep what the diff shows (content and prior) and
// lose the checkpoint's copy; once discarded (a paused build cancelled),
// nothing stays.
func TestFinishedChangeSetKeepsOnlyTheDiff(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	staged := func(status string) uuid.UUID {
		var id uuid.UUID
		withoutPickup(t, pool, func(tx pgx.Tx) {
			f := dbtest.HeldBuild(t, tx, uuid.New(), "p")
			id = f.TaskID
			if _, _, err := agentsql.OpenChangeSet(ctx, tx, f, uuid.New()); err != nil {
				t.Fatal(err)
			}
			if err := agentsql.PutChangeEntry(ctx, tx, f, agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("after\n")}); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `UPDATE change_set_entries SET cp = true, cp_op = 'write', cp_content = 'checkpoint', prior = 'before', prior_exists = true
				WHERE task_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if status == agentsql.ChangeSetApplied {
				if _, err := tx.Exec(ctx, `UPDATE change_sets SET status = 'applied' WHERE task_id = $1`, id); err != nil {
					t.Fatal(err)
				}
				return
			}
			// A task that ends with its set open discards it.
			if _, err := tx.Exec(ctx, `UPDATE ai_tasks SET status = 'cancelled' WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
		})
		return id
	}
	applied, discarded := staged(agentsql.ChangeSetApplied), staged(agentsql.ChangeSetDiscarded)

	var content, prior, cpContent []byte
	var cp bool
	if err := pool.QueryRow(ctx, `SELECT content, prior, cp, cp_content FROM change_set_entries WHERE task_id = $1`, applied).
		Scan(&content, &prior, &cp, &cpContent); err != nil {
		t.Fatal(err)
	}
	if string(content) != "after\n" || string(prior) != "before" || cp || cpContent != nil {
		t.Errorf("applied entry: content %q prior %q cp %v cp_content %q; want content and prior kept, the checkpoint's copy gone",
			content, prior, cp, cpContent)
	}
	status, changes, err := agentsql.BuildChanges(ctx, pool, applied)
	if err != nil || status != agentsql.ChangeSetApplied || len(changes) != 1 || string(changes[0].Content) != "after\n" {
		t.Errorf("the applied build's diff: %q, %+v, %v", status, changes, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM change_set_entries WHERE task_id = $1`, discarded).Scan(&left); err != nil || left != 0 {
		t.Errorf("the discarded set kept %d entries (%v), want none", left, err)
	}
}

// TestDropEventPartitionRefusals: a day is not dropped when it holds a task
// the caller did not read (events written into it since), when one of its
// tasks went back to work, or when agent_events' lock does not come within
// the timeout (a long reader); each time the day and its events stay.
func TestDropEventPartitionRefusals(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -50)
	part := "agent_events_p" + day.Format("20060102")
	if _, err := pool.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, day); err != nil {
		t.Fatal(err)
	}
	finished := func() uuid.UUID {
		id := insertTaskIn(t, pool, agentsql.StatusCancelled)
		if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, created_at)
			SELECT id, project_id, 'log', $2 FROM ai_tasks WHERE id = $1`, id, day.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b := finished(), finished()
	events := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events WHERE created_at < $1`, day.Add(24*time.Hour)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("UnknownTask", func(t *testing.T) {
		dropped, err := agentsql.DropEventPartition(ctx, pool, part, []uuid.UUID{a}, time.Second)
		if err != nil || dropped || events() != 2 {
			t.Fatalf("drop knowing only %s: dropped %v, %v, %d events left; want kept", a, dropped, err, events())
		}
	})
	t.Run("TaskBackToWork", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET status = 'queued' WHERE id = $1`, b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := pool.Exec(context.WithoutCancel(ctx), `UPDATE ai_tasks SET status = 'cancelled' WHERE id = $1`, b); err != nil {
				t.Error(err)
			}
		})
		dropped, err := agentsql.DropEventPartition(ctx, pool, part, []uuid.UUID{a, b}, time.Second)
		if err != nil || dropped || events() != 2 {
			t.Fatalf("drop with %s queued again: dropped %v, %v, %d events left; want kept", b, dropped, err, events())
		}
	})
	t.Run("LockTimeout", func(t *testing.T) {
		reader, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Rollback(context.WithoutCancel(ctx))
		if _, err := reader.Exec(ctx, `SELECT count(*) FROM agent_events`); err != nil {
			t.Fatal(err)
		}
		dropped, err := agentsql.DropEventPartition(ctx, pool, part, []uuid.UUID{a, b}, 100*time.Millisecond)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || dropped {
			t.Fatalf("drop behind a reader: dropped %v, %v; want lock_not_available", dropped, err)
		}
		if err := reader.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if events() != 2 {
			t.Fatalf("%d events left after the refused drop, want 2", events())
		}
	})
	dropped, err := agentsql.DropEventPartition(ctx, pool, part, []uuid.UUID{a, b}, time.Second)
	if err != nil || !dropped || events() != 0 {
		t.Fatalf("drop knowing both finished tasks: dropped %v, %v, %d events left", dropped, err, events())
	}
}

// TestSealedDaysSkipped: once the leader's pass sealed the past days, a
// project stream's read after a cursor, the event cursor of a new event,
// the task list's head and the tasks with events after a new id plan and
// lock only the days not sealed (today, the days ahead, the default
// partition), and still return every row; a read from the start, the
// cursor of an old event, the head of a project whose newest event is in a
// sealed day and the tasks with events since id 0 read the old days. A
// row written into a sealed day afterwards (an explicit old created_at and
// a new xid) is refused, so a seal is never wrong.
func TestSealedDaysSkipped(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task := insertTaskIn(t, pool, agentsql.StatusQueued)
	idle := insertTaskIn(t, pool, agentsql.StatusQueued)
	var project, idleProject uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT (SELECT project_id FROM ai_tasks WHERE id = $1), (SELECT project_id FROM ai_tasks WHERE id = $2)`,
		task, idle).Scan(&project, &idleProject); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	old := today.AddDate(0, 0, -5).Add(time.Hour)
	var oldIDs []int64
	// Ten past days from two days back: a day is sealed an hour after it
	// ends, so yesterday is not before 01:00 UTC.
	for i := 2; i <= 11; i++ {
		if _, err := pool.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, today.AddDate(0, 0, -i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []uuid.UUID{task, idle} {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload, created_at)
			SELECT id, project_id, 'log', '{"message": "old"}', $2 FROM ai_tasks WHERE id = $1 RETURNING id`, k, old).Scan(&id); err != nil {
			t.Fatal(err)
		}
		oldIDs = append(oldIDs, id)
	}
	if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	var sealed, open int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE xid_below IS NOT NULL), count(*) FILTER (WHERE xid_below IS NULL) FROM agent_event_days`).Scan(&sealed, &open); err != nil {
		t.Fatal(err)
	}
	if sealed != 10 || open != 4 {
		t.Fatalf("%d days sealed and %d open, want the 10 past days sealed, today and 3 ahead open", sealed, open)
	}

	rows, err := agentsql.InsertEvents(ctx, pool, task, project, []agentsql.NewEvent{
		{Type: "log", Payload: []byte(`{"message": "new 1"}`)}, {Type: "log", Payload: []byte(`{"message": "new 2"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	// A project stream delivers below the cluster's xmin: wait until
	// every event is deliverable, reading from the start (every day).
	var all []agentsql.ProjectEventRow
	poll.Until(t, "the project stream reads the old event and the 2 new", 30*time.Second, func() bool {
		all, _, err = agentsql.ProjectEventsAfter(ctx, pool, project, agentsql.ProjectCursor{}, 100)
		return err == nil && len(all) == 3
	})
	if all[0].ID != oldIDs[0] || all[2].ID != rows[1].ID {
		t.Errorf("stream from the start read %d, %d, %d; want %d, %d, %d", all[0].ID, all[1].ID, all[2].ID, oldIDs[0], rows[0].ID, rows[1].ID)
	}

	lockedSealed := func(read func(tx pgx.Tx) error) []string {
		t.Helper()
		return lockedSealedDays(t, pool, read)
	}

	var cur agentsql.ProjectCursor
	if locked := lockedSealed(func(tx pgx.Tx) error {
		cur, err = agentsql.EventCursor(ctx, tx, project, rows[0].ID)
		return err
	}); len(locked) > 0 || cur.ID != rows[0].ID {
		t.Errorf("EventCursor of a new event = %+v, locked sealed days %v", cur, locked)
	}
	var got []agentsql.ProjectEventRow
	if locked := lockedSealed(func(tx pgx.Tx) error {
		got, _, err = agentsql.ProjectEventsAfter(ctx, tx, project, cur, 100)
		return err
	}); len(locked) > 0 || len(got) != 1 || got[0].ID != rows[1].ID {
		t.Errorf("stream after the first new event read %d events, locked sealed days %v; want the second new event alone", len(got), locked)
	}
	// A stream keeps the floor of the cursor it started from.
	floor, err := agentsql.ProjectEventFloor(ctx, pool, cur)
	if err != nil {
		t.Fatal(err)
	}
	if locked := lockedSealed(func(tx pgx.Tx) error {
		got, _, err = agentsql.ProjectEventsAfterFloor(ctx, tx, project, cur, floor, 100)
		return err
	}); len(locked) > 0 || len(got) != 1 || got[0].ID != rows[1].ID {
		t.Errorf("stream after the first new event, its floor carried, read %d events, locked sealed days %v; want the second new event alone", len(got), locked)
	}
	var page agentsql.TaskPage
	if locked := lockedSealed(func(tx pgx.Tx) error {
		page, err = agentsql.ListProjectTasks(ctx, tx, project, agentsql.TaskQuery{Limit: 50})
		return err
	}); len(locked) > 0 || page.Head.ID != rows[1].ID {
		t.Errorf("task list's head = %+v, locked sealed days %v; want the newest event %d", page.Head, locked, rows[1].ID)
	}

	var keys []agentsql.EventKey
	var top int64
	if locked := lockedSealed(func(tx pgx.Tx) error {
		keys, top, err = agentsql.EventsSince(ctx, tx, rows[0].ID-1)
		return err
	}); len(locked) > 0 || len(keys) != 1 || keys[0].Task != task || top != rows[1].ID {
		t.Errorf("EventsSince(%d) = %v, %d, locked sealed days %v; want the task up to %d", rows[0].ID-1, keys, top, locked, rows[1].ID)
	}

	// Of an old event, of a project idle since the seal, since the start.
	if keys, top, err := agentsql.EventsSince(ctx, pool, 0); err != nil || len(keys) != 2 || top != rows[1].ID {
		t.Errorf("EventsSince(0) = %v, %d, %v; want both tasks up to %d", keys, top, err, rows[1].ID)
	}
	if c, err := agentsql.EventCursor(ctx, pool, project, oldIDs[0]); err != nil || c.ID != oldIDs[0] || c.Xid == 0 {
		t.Errorf("EventCursor of an old event = %+v, %v", c, err)
	}
	if p, err := agentsql.ListProjectTasks(ctx, pool, idleProject, agentsql.TaskQuery{Limit: 50}); err != nil || p.Head.ID != oldIDs[1] {
		t.Errorf("idle project's head = %+v, %v; want its old event %d", p.Head, err, oldIDs[1])
	}

	// The tasks.md sweep after a status change made since the seal.
	phase, err := agentsql.InsertEvents(ctx, pool, task, project, []agentsql.NewEvent{{Type: "agent_phase", Payload: []byte(`{"phase": "started"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tasks_md_cursor SET xid = (SELECT xid FROM agent_events WHERE id = $1)`, phase[0].ID); err != nil {
		t.Fatal(err)
	}
	var changed []uuid.UUID
	if locked := lockedSealed(func(tx pgx.Tx) error {
		changed, _, err = agentsql.ChangedTaskBoards(ctx, tx)
		return err
	}); len(locked) > 0 || !slices.Equal(changed, []uuid.UUID{project}) {
		t.Errorf("ChangedTaskBoards = %v, locked sealed days %v; want the project", changed, locked)
	}

	_, err = pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, created_at) VALUES ($1, $2, 'log', $3)`, task, project, old)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("a late row into a sealed day: %v, want a check violation", err)
	}
}

// TestTaskReadsSkipSealedDays: a task inserted after days were sealed
// reads its events (TaskEventsAfter, TasksEventsAfter) without planning or
// locking a sealed day, and gets every one; a task from before the seal,
// or with no floor (NULL), still reads its
// events in the sealed days. The floor is the database's: an inserter's
// value is replaced, and no writer changes it.
func TestTaskReadsSkipSealedDays(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	before := insertTaskIn(t, pool, agentsql.StatusQueued)
	unbounded := insertTaskIn(t, pool, agentsql.StatusQueued)
	// A task from before the column: no floor (the replica role skips the
	// guard, as only a superuser can).
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE ai_tasks SET events_id_floor = NULL WHERE id = $1`, unbounded)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	old := today.AddDate(0, 0, -5).Add(time.Hour)
	// Ten past days from two days back: a day is sealed an hour after it
	// ends, so yesterday is not before 01:00 UTC.
	for i := 2; i <= 11; i++ {
		if _, err := pool.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, today.AddDate(0, 0, -i)); err != nil {
			t.Fatal(err)
		}
	}
	oldIDs := map[uuid.UUID]int64{}
	for _, k := range []uuid.UUID{before, unbounded} {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type, payload, created_at)
			SELECT id, project_id, 1, 'log', '{"message": "old"}', $2 FROM ai_tasks WHERE id = $1 RETURNING id`, k, old).Scan(&id); err != nil {
			t.Fatal(err)
		}
		oldIDs[k] = id
	}
	if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	var sealed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_event_days WHERE xid_below IS NOT NULL`).Scan(&sealed); err != nil || sealed != 10 {
		t.Fatalf("%d days sealed (%v), want the 10 past days", sealed, err)
	}

	// Inserted after the seal, as the owner, naming a floor of its own.
	var task, project uuid.UUID
	var floor int64
	if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, status, events_id_floor)
		VALUES ($1, 'chat', 'x', 'paused', 0) RETURNING id, project_id, events_id_floor`, uuid.New()).Scan(&task, &project, &floor); err != nil {
		t.Fatal(err)
	}
	if floor < oldIDs[unbounded] {
		t.Errorf("events_id_floor = %d after an inserter gave 0, want the sequence's position (at least %d)", floor, oldIDs[unbounded])
	}
	rows, err := agentsql.InsertEvents(ctx, pool, task, project, []agentsql.NewEvent{
		{Type: "log", Payload: []byte(`{"message": "new 1"}`)}, {Type: "log", Payload: []byte(`{"message": "new 2"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].ID <= floor {
		t.Errorf("the task's first event has id %d, not above its floor %d", rows[0].ID, floor)
	}

	lockedSealed := func(read func(tx pgx.Tx) error) []string {
		t.Helper()
		return lockedSealedDays(t, pool, read)
	}
	ids := func(evs []agentsql.EventRow) []int64 {
		out := make([]int64, len(evs))
		for i, e := range evs {
			out[i] = e.ID
		}
		return out
	}
	var got []agentsql.EventRow
	if locked := lockedSealed(func(tx pgx.Tx) error {
		got, err = agentsql.TaskEventsAfter(ctx, tx, task, 0, 100)
		return err
	}); len(locked) > 0 || !slices.Equal(ids(got), []int64{rows[0].ID, rows[1].ID}) {
		t.Errorf("TaskEventsAfter of a new task read %v, locked sealed days %v; want %d, %d and none", ids(got), locked, rows[0].ID, rows[1].ID)
	}
	if locked := lockedSealed(func(tx pgx.Tx) error {
		got, err = agentsql.TasksEventsAfter(ctx, tx, []agentsql.TaskCursor{{Task: task, AfterSeq: 1}}, 100)
		return err
	}); len(locked) > 0 || !slices.Equal(ids(got), []int64{rows[1].ID}) {
		t.Errorf("TasksEventsAfter of a new task read %v, locked sealed days %v; want %d and none", ids(got), locked, rows[1].ID)
	}

	var logs []agentsql.LogEntry
	if locked := lockedSealed(func(tx pgx.Tx) error {
		logs, _, err = agentsql.ProjectLogs(ctx, tx, project, agentsql.LogQuery{TaskID: task, Limit: 50})
		return err
	}); len(locked) > 0 || len(logs) != 2 || logs[0].ID != rows[1].ID {
		t.Errorf("ProjectLogs of a new task read %d entries, locked sealed days %v; want its 2 and none", len(logs), locked)
	}

	// Tasks whose events lie in sealed days read them.
	for _, k := range []uuid.UUID{before, unbounded} {
		if got, err := agentsql.TaskEventsAfter(ctx, pool, k, 0, 100); err != nil || !slices.Equal(ids(got), []int64{oldIDs[k]}) {
			t.Errorf("TaskEventsAfter of task %s = %v, %v; want its old event %d", k, ids(got), err, oldIDs[k])
		}
	}
	for _, k := range []uuid.UUID{before, unbounded} {
		var p uuid.UUID
		if err := pool.QueryRow(ctx, `SELECT project_id FROM ai_tasks WHERE id = $1`, k).Scan(&p); err != nil {
			t.Fatal(err)
		}
		if logs, _, err := agentsql.ProjectLogs(ctx, pool, p, agentsql.LogQuery{TaskID: k, Limit: 50}); err != nil || len(logs) != 1 || logs[0].ID != oldIDs[k] {
			t.Errorf("ProjectLogs of task %s = %v, %v; want its old event %d", k, logs, err, oldIDs[k])
		}
	}
	got, err = agentsql.TasksEventsAfter(ctx, pool, []agentsql.TaskCursor{{Task: task}, {Task: unbounded}, {Task: before}}, 100)
	if want := []int64{rows[0].ID, rows[1].ID, oldIDs[unbounded], oldIDs[before]}; err != nil || !slices.Equal(ids(got), want) {
		t.Errorf("TasksEventsAfter of new and old tasks = %v, %v; want %v", ids(got), err, want)
	}

	// No app role may name the floor; no writer may change it.
	project2 := uuid.New()
	for _, role := range []string{"authenticated", "service_role"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := asRole(ctx, tx, role, claims(role, project2)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, events_id_floor) VALUES ($1, 'chat', 'x', 0)`, project2)
			return err
		})
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("insert naming events_id_floor as %s: %v, want permission denied", role, err)
		}
	}
	for _, tc := range []struct{ name, role, setup string }{
		{"Owner", "", ""},
		{"Machine", "", "SELECT set_config('agentworker.machine', 'on', true)"},
		{"Service", "service_role", ""},
	} {
		for _, set := range []string{"0", "NULL", "events_id_floor + 1000"} {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if tc.role != "" {
					if err := asRole(ctx, tx, tc.role, claims(tc.role, project)); err != nil {
						return err
					}
				}
				if tc.setup != "" {
					if _, err := tx.Exec(ctx, tc.setup); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, `UPDATE ai_tasks SET events_id_floor = `+set+` WHERE id = $1`, task)
				return err
			})
			if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) ||
				(pgErr.ConstraintName != "ai_tasks_events_id_floor_immutable" && pgErr.Code != "42501") {
				t.Errorf("%s: events_id_floor = %s: %v, want it refused", tc.name, set, err)
			}
		}
	}
	var still int64
	if err := pool.QueryRow(ctx, `SELECT events_id_floor FROM ai_tasks WHERE id = $1`, task).Scan(&still); err != nil || still != floor {
		t.Errorf("events_id_floor = %d, %v after the refused updates; want %d", still, err, floor)
	}
}

// TestEventIDsAreDrawnOneAtATime: the seals and the tasks' event floors
// rest on an event's id being drawn when it is inserted; a sequence cache
// would hand a backend ids drawn earlier, below a seal's id_below or a
// task's floor.
func TestEventIDsAreDrawnOneAtATime(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var cache int64
	if err := pool.QueryRow(t.Context(), `SELECT seqcache FROM pg_sequence WHERE seqrelid = 'agent_events_id_seq'::regclass`).Scan(&cache); err != nil || cache != 1 {
		t.Errorf("agent_events_id_seq caches %d ids (%v), want 1", cache, err)
	}
}

// TestHolderBatchesSkipSealedDays: a holder's keyed batch looks for its
// key only in the days from the claim's floor (Claim.EventsSince), so it
// locks no sealed day, on its first writes (custom plans) as on later ones
// of a prepared statement; a batch sent again is still found in a sealed
// day when the task's events reach into it; without a floor every day is
// read.
func TestHolderBatchesSkipSealedDays(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	old := insertTaskIn(t, pool, agentsql.StatusQueued)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	// Ten past days from two days back: a day is sealed an hour after it
	// ends, so yesterday is not before 01:00 UTC.
	for i := 2; i <= 11; i++ {
		if _, err := pool.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, today.AddDate(0, 0, -i)); err != nil {
			t.Fatal(err)
		}
	}
	// The old task wrote a keyed batch five days ago (a seq far above what
	// its claim writes).
	oldKey := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type, payload, batch, created_at)
		SELECT id, project_id, 1000, 'log', '{"message": "old"}', $2, $3 FROM ai_tasks WHERE id = $1`,
		old, oldKey, today.AddDate(0, 0, -5).Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.PrepareEventPartitions(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	fresh := insertTaskIn(t, pool, agentsql.StatusQueued)
	claim := func(id uuid.UUID) agentsql.Claim {
		t.Helper()
		c, err := agentsql.ClaimAndStart(ctx, pool, id, 1, "test", time.Minute, false, 0)
		if err != nil || !c.Claimed {
			t.Fatalf("claim %s: %+v, %v", id, c, err)
		}
		return c
	}
	cf, co := claim(fresh), claim(old)
	if cf.EventsSince.Before(today.AddDate(0, 0, -1)) {
		t.Errorf("a task inserted after the seal has EventsSince %s, want no earlier than yesterday", cf.EventsSince)
	}
	if !co.EventsSince.Before(today.AddDate(0, 0, -5).Add(time.Hour)) {
		t.Errorf("a task with an event five days ago has EventsSince %s, want before it", co.EventsSince)
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	write := func(c agentsql.Claim, key uuid.UUID, since time.Time) ([]agentsql.EventRow, []string) {
		t.Helper()
		var rows []agentsql.EventRow
		locked := lockedSealedDays(t, conn, func(tx pgx.Tx) error {
			var err error
			rows, err = agentsql.InsertEventBatch(ctx, tx, agentsql.EventBatch{TaskID: c.Task.ID, ProjectID: c.Task.ProjectID,
				Fence: &c.Task.Fence, Key: key, Since: since, Events: []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"message": "m"}`)}}})
			return err
		})
		return rows, locked
	}
	// More writes than Postgres plans custom before it weighs a generic plan.
	for i := range 8 {
		if rows, locked := write(cf, uuid.New(), cf.EventsSince); len(rows) != 1 || len(locked) > 0 {
			t.Fatalf("write %d of a new task: %d rows, locked sealed days %v; want 1 row and none", i+1, len(rows), locked)
		}
	}
	key := uuid.New()
	if rows, _ := write(cf, key, cf.EventsSince); len(rows) != 1 {
		t.Fatalf("a keyed write wrote %d rows", len(rows))
	}
	if rows, locked := write(cf, key, cf.EventsSince); len(rows) != 0 || len(locked) > 0 {
		t.Errorf("the same batch sent again: %d rows, locked sealed days %v; want none and none", len(rows), locked)
	}
	if rows, _ := write(co, oldKey, co.EventsSince); len(rows) != 0 {
		t.Errorf("a batch written five days ago, sent again, wrote %d rows; want none", len(rows))
	}
	if _, locked := write(cf, uuid.New(), time.Time{}); len(locked) < 10 {
		t.Errorf("a write without a floor locked the sealed days %v; want all 10 read", locked)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events WHERE task_id = $1 AND batch = $2`, old, oldKey).Scan(&n); err != nil || n != 1 {
		t.Errorf("the old batch is there %d times (%v), want once", n, err)
	}
}

// lockedSealedDays runs read in a transaction and returns the sealed
// partitions it locked.
func lockedSealedDays(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, read func(tx pgx.Tx) error) []string {
	t.Helper()
	ctx := t.Context()
	var got []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := read(tx); err != nil {
			return err
		}
		r, err := tx.Query(ctx, `SELECT d.partition FROM pg_locks l JOIN agent_event_days d ON d.partition = l.relation::regclass::text
			WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND d.xid_below IS NOT NULL`)
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(r, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
