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
