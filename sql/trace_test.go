package sql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestTraceID: an app's own INSERT may set trace_id (as authenticated
// through PostgREST, or as the service), a malformed one is refused, a
// child without one takes its parent's, and no writer changes it
// afterwards, the worker included.
func TestTraceID(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	project := uuid.New()
	inTx := func(role string, fn func(tx pgx.Tx) error) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if role != "" {
			if err := asRole(ctx, tx, role, claims(role, project)); err != nil {
				t.Fatal(err)
			}
		}
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	insert := func(role, trace string) (uuid.UUID, error) {
		var id uuid.UUID
		err := inTx(role, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, trace_id) VALUES ($1, 'chat', 'hi', $2) RETURNING id`,
				project, trace).Scan(&id)
		})
		return id, err
	}
	for _, role := range []string{"authenticated", "service_role"} {
		id, err := insert(role, "app-trace-1")
		if err != nil {
			t.Fatalf("insert with trace_id as %s: %v", role, err)
		}
		task, err := agentsql.GetTask(ctx, pool, id)
		if err != nil || task.TraceID != "app-trace-1" {
			t.Fatalf("task inserted as %s: trace %q, %v", role, task.TraceID, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", 65), "a b", "a\nb"} {
		var pgErr *pgconn.PgError
		if _, err := insert("", bad); !errors.As(err, &pgErr) || pgErr.ConstraintName != "ai_tasks_trace_id_check" {
			t.Errorf("insert with trace_id %q: %v, want ai_tasks_trace_id_check", bad, err)
		}
	}
	untraced, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "hi"})
	if err != nil || untraced.TraceID != "" {
		t.Fatalf("a task inserted without a trace: %q, %v", untraced.TraceID, err)
	}
	traced, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "hi", TraceID: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	// A child takes its parent's trace unless it brings its own.
	for _, tc := range []struct{ own, want string }{{"", "t-1"}, {"t-own", "t-own"}} {
		child, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "hi",
			ParentTaskID: &traced.ID, TraceID: tc.own})
		if err != nil || child.TraceID != tc.want {
			t.Errorf("a child with trace %q: %q, %v; want %q", tc.own, child.TraceID, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name, role, setup string
		id                uuid.UUID
		set               any
	}{
		{"Owner", "", "", traced.ID, "t-2"},
		{"OwnerClears", "", "", traced.ID, nil},
		{"OwnerSetsLate", "", "", untraced.ID, "t-3"},
		{"Machine", "", "SELECT set_config('agentworker.machine', 'on', true)", traced.ID, "t-2"},
		{"Service", "service_role", "", traced.ID, "t-2"},
	} {
		err := inTx(tc.role, func(tx pgx.Tx) error {
			if tc.setup != "" {
				if _, err := tx.Exec(ctx, tc.setup); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `UPDATE ai_tasks SET trace_id = $2 WHERE id = $1`, tc.id, tc.set)
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.ConstraintName != "ai_tasks_trace_id_immutable" && pgErr.Code != "42501") {
			t.Errorf("%s: update of trace_id: %v, want it refused", tc.name, err)
		}
	}
}

// TestTraceParent: an app's own INSERT may name the span its task joins
// (trace_parent, as authenticated through PostgREST, or as the service);
// anything but a W3C span id is refused, and no writer changes it
// afterwards.
func TestTraceParent(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	project := uuid.New()
	insert := func(role, parent string) (uuid.UUID, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := asRole(ctx, tx, role, claims(role, project)); err != nil {
			t.Fatal(err)
		}
		var id uuid.UUID
		if err := tx.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, trace_id, trace_parent)
			VALUES ($1, 'chat', 'hi', '4bf92f3577b34da6a3ce929d0e0e4736', $2) RETURNING id`, project, parent).Scan(&id); err != nil {
			return id, err
		}
		return id, tx.Commit(ctx)
	}
	for _, role := range []string{"authenticated", "service_role"} {
		id, err := insert(role, "00f067aa0ba902b7")
		if err != nil {
			t.Fatalf("insert with trace_parent as %s: %v", role, err)
		}
		if task, err := agentsql.GetTask(ctx, pool, id); err != nil || task.TraceParent != "00f067aa0ba902b7" {
			t.Fatalf("task inserted as %s: trace parent %q, %v", role, task.TraceParent, err)
		}
	}
	for _, bad := range []string{"", "0000000000000000", "00F067AA0BA902B7", "00f067aa0ba902b", "00f067aa0ba902b7a"} {
		var pgErr *pgconn.PgError
		if _, err := insert("service_role", bad); !errors.As(err, &pgErr) || pgErr.ConstraintName != "ai_tasks_trace_parent_check" {
			t.Errorf("insert with trace_parent %q: %v, want ai_tasks_trace_parent_check", bad, err)
		}
	}
	id, err := insert("service_role", "00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []any{"00f067aa0ba902b8", nil} {
		_, err := pool.Exec(ctx, `UPDATE ai_tasks SET trace_parent = $2 WHERE id = $1`, id, set)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.ConstraintName != "ai_tasks_trace_id_immutable" {
			t.Errorf("update of trace_parent to %v: %v, want it refused", set, err)
		}
	}
}
