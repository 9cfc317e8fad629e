package sql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// taskEvents counts the events naming task.
func taskEvents(t *testing.T, pool *pgxpool.Pool, task uuid.UUID) int {
	t.Helper()
	n, _ := eventCount(t, pool, task)
	return n
}

// projectEvents counts the events of project that name no task.
func projectEvents(t *testing.T, pool *pgxpool.Pool, project uuid.UUID) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM agent_events WHERE project_id = $1 AND task_id IS NULL`, project).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var oneLog = []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"x"}`)}}

// TestEventsFollowTheirTask: agent_events.task_id has no foreign key (its
// per-row check was redundant with the seq update every write makes), yet
// an event never names a task that does not exist, whoever writes it, and a
// task's events go with it as they did by ON DELETE CASCADE.
func TestEventsFollowTheirTask(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()

	t.Run("a writer naming a missing task is refused", func(t *testing.T) {
		missing := uuid.New()
		_, err := agentsql.InsertEvents(ctx, pool, missing, uuid.New(), oneLog)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23503" {
			t.Fatalf("insert for a missing task: %v, want SQLSTATE 23503", err)
		}
		if n := taskEvents(t, pool, missing); n != 0 {
			t.Errorf("%d events written for a missing task", n)
		}
	})

	t.Run("a holder's batch for a deleted task writes nothing", func(t *testing.T) {
		task, f := claimed(t, pool)
		if _, err := pool.Exec(ctx, `DELETE FROM ai_tasks WHERE id = $1`, task.ID); err != nil {
			t.Fatal(err)
		}
		_, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch, Events: oneLog})
		if !errors.Is(err, agentsql.ErrFenced) {
			t.Fatalf("batch for a deleted task: %v, want ErrFenced", err)
		}
		if n := taskEvents(t, pool, task.ID); n != 0 {
			t.Errorf("%d events written for a deleted task", n)
		}
	})

	t.Run("delete takes a task's events only", func(t *testing.T) {
		project := uuid.New()
		var tasks [3]uuid.UUID
		for i := range tasks {
			task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := agentsql.InsertEvents(ctx, pool, task.ID, project, append(oneLog, oneLog...)); err != nil {
				t.Fatal(err)
			}
			tasks[i] = task.ID
		}
		if _, err := pool.Exec(ctx, `INSERT INTO agent_events (project_id, type) VALUES ($1, 'log')`, project); err != nil {
			t.Fatal(err)
		}
		// Two in one statement, as the key's cascade did.
		if _, err := pool.Exec(ctx, `DELETE FROM ai_tasks WHERE id = ANY ($1)`, tasks[:2]); err != nil {
			t.Fatal(err)
		}
		if a, b, c, p := taskEvents(t, pool, tasks[0]), taskEvents(t, pool, tasks[1]), taskEvents(t, pool, tasks[2]), projectEvents(t, pool, project); a != 0 || b != 0 || c != 2 || p != 1 {
			t.Errorf("after deleting two tasks: events %d, %d (want 0, 0), the third task's %d (want 2), the project's %d (want 1)", a, b, c, p)
		}
	})

	t.Run("a delete waits for an event write and takes it too", func(t *testing.T) {
		task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := agentsql.InsertEvents(ctx, tx, task.ID, task.ProjectID, oneLog); err != nil {
			t.Fatal(err)
		}
		deleted := make(chan error, 1)
		go func() {
			_, err := pool.Exec(ctx, `DELETE FROM ai_tasks WHERE id = $1`, task.ID)
			deleted <- err
		}()
		select {
		case err := <-deleted:
			t.Fatalf("the delete did not wait for the writer's row lock: %v", err)
		case <-time.After(200 * time.Millisecond): // a wait that should last, not a result
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		if n := taskEvents(t, pool, task.ID); n != 0 {
			t.Errorf("%d events of the deleted task left behind", n)
		}
	})
}

// TestTruncateTasksTakesTheirEvents: TRUNCATE ai_tasks CASCADE empties the
// tables that name tasks; project events, which name none, stay.
func TestTruncateTasksTakesTheirEvents(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t) // a database of its own: the truncate takes every task
	ctx := t.Context()
	task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, oneLog); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (project_id, type) VALUES ($1, 'log')`, task.ProjectID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE ai_tasks CASCADE`); err != nil {
		t.Fatal(err)
	}
	if n, p := taskEvents(t, pool, task.ID), projectEvents(t, pool, task.ProjectID); n != 0 || p != 1 {
		t.Errorf("after TRUNCATE ai_tasks CASCADE: %d task events (want 0), %d project events (want 1)", n, p)
	}
}
