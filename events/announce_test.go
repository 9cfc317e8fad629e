package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// listen returns a connection listening on agent_events.
func listen(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "LISTEN "+agentsql.EventsChannel); err != nil {
		t.Fatal(err)
	}
	return conn
}

// next returns the next announcement, or ok false when none arrives in wait.
func next(t *testing.T, conn *pgx.Conn, wait time.Duration) (a agentsql.Announcement, raw string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return a, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(n.Payload), &a); err != nil {
		t.Fatalf("announcement %q: %v", n.Payload, err)
	}
	return a, n.Payload, true
}

func runAnnouncer(t *testing.T, a *events.Announcer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("announcer: %v", err)
		}
	})
}

// A task's transaction never notifies: its events are announced by the
// process's Announcer once the caller says the transaction committed.
func TestAnnouncerNotifiesAfterCommitOnly(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, agentsql.TypeBuild)
	conn := listen(t, pool)
	a := events.NewAnnouncer(pool, nil)

	var rec *events.Recorder
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		rec = events.NewRecorder(tx, task.ID, task.ProjectID, events.WithAnnouncer(a))
		_, err := rec.Emit(t.Context(), events.Log{Level: events.LevelInfo, Message: "one"}, events.Log{Level: events.LevelInfo, Message: "two"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing was notified by the transaction itself (the announcer is not
	// even running yet).
	if got, raw, ok := next(t, conn, 300*time.Millisecond); ok {
		t.Fatalf("the writing transaction notified: %s (%+v)", raw, got)
	}
	rec.Committed()
	runAnnouncer(t, a)
	got, raw, ok := next(t, conn, 5*time.Second)
	if !ok || !slices.Equal(got.Tasks, []uuid.UUID{task.ID}) || !slices.Equal(got.Projects, []uuid.UUID{task.ProjectID}) {
		t.Fatalf("announcement after commit = %s, %t", raw, ok)
	}

	// A write through the pool commits by itself: announced at once.
	prec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithAnnouncer(a))
	if _, err := prec.Emit(t.Context(), events.Log{Level: events.LevelInfo, Message: "three"}); err != nil {
		t.Fatal(err)
	}
	if got, raw, ok := next(t, conn, 5*time.Second); !ok || !slices.Contains(got.Tasks, task.ID) {
		t.Fatalf("announcement of a pool write = %s, %t", raw, ok)
	}
}

// Announcements queued together go out as one notification (or a few, each
// under Postgres's 8000-byte payload limit), naming every task and project.
func TestAnnouncerCoalesces(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	conn := listen(t, pool)
	a := events.NewAnnouncer(pool, nil)
	want := map[uuid.UUID]uuid.UUID{}
	project := uuid.New()
	for i := range 250 {
		task := uuid.New()
		p := project
		if i%2 == 0 {
			p = uuid.New()
		}
		want[task] = p
		a.Announce(task, p)
	}
	runAnnouncer(t, a)
	seenTasks, seenProjects := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	notifications := 0
	for len(seenTasks) < len(want) {
		got, raw, ok := next(t, conn, 5*time.Second)
		if !ok {
			t.Fatalf("%d of %d tasks announced", len(seenTasks), len(want))
		}
		notifications++
		if len(raw) >= 8000 || len(got.Tasks) > agentsql.AnnouncementBatch {
			t.Fatalf("payload of %d bytes, %d tasks", len(raw), len(got.Tasks))
		}
		for _, id := range got.Tasks {
			seenTasks[id] = true
		}
		for _, id := range got.Projects {
			seenProjects[id] = true
		}
	}
	if notifications != 3 {
		t.Errorf("250 queued tasks went out in %d notifications, want 3", notifications)
	}
	for task, p := range want {
		if !seenProjects[p] {
			t.Fatalf("project %s of task %s not announced", p, task)
		}
	}
}

// Writers other than the worker (psql, PostgREST, SQL functions) are still
// announced, by the statement-level trigger: once per statement.
func TestPlainSQLWritersAnnounced(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	conn := listen(t, pool)
	tasks := make([]agentsql.Task, 150)
	for i := range tasks {
		tasks[i] = newTask(t, pool, agentsql.TypeChat)
	}
	ctx := t.Context()

	// One row.
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload) VALUES ($1, $2, 'log', '{}')`,
		tasks[0].ID, tasks[0].ProjectID); err != nil {
		t.Fatal(err)
	}
	if got, raw, ok := next(t, conn, 5*time.Second); !ok || !slices.Equal(got.Tasks, []uuid.UUID{tasks[0].ID}) {
		t.Fatalf("announcement of a plain insert = %s, %t", raw, ok)
	}

	// 300 rows over 150 tasks in one statement: two notifications of at
	// most 100 tasks, each task once.
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload)
		SELECT t.id, t.project_id, 'log', '{}' FROM ai_tasks t, generate_series(1, 2)`); err != nil {
		t.Fatal(err)
	}
	seen := map[uuid.UUID]int{}
	for range 2 {
		got, raw, ok := next(t, conn, 5*time.Second)
		if !ok || len(raw) >= 8000 {
			t.Fatalf("announcement of a 300-row insert = %d bytes, %t", len(raw), ok)
		}
		for _, id := range got.Tasks {
			seen[id]++
		}
	}
	for _, task := range tasks {
		if seen[task.ID] != 1 {
			t.Fatalf("task %s named %d times", task.ID, seen[task.ID])
		}
	}
	if got, raw, ok := next(t, conn, 200*time.Millisecond); ok {
		t.Fatalf("a third notification: %s (%+v)", raw, got)
	}

	// The worker's mark covers its own statement only: a plain insert
	// later in the same transaction is announced by the trigger.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := agentsql.InsertEventBatch(ctx, tx, agentsql.EventBatch{TaskID: tasks[1].ID, ProjectID: tasks[1].ProjectID,
			Events: []agentsql.NewEvent{{Type: "log", Payload: []byte(`{}`)}}, AfterCommit: true}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload) VALUES ($1, $2, 'log', '{}')`,
			tasks[2].ID, tasks[2].ProjectID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, raw, ok := next(t, conn, 5*time.Second); !ok || !slices.Equal(got.Tasks, []uuid.UUID{tasks[2].ID}) {
		t.Fatalf("announcement after a marked insert = %s, %t", raw, ok)
	}
}
