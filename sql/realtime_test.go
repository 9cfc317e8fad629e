package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func newTask(t *testing.T, pool *pgxpool.Pool, projectID uuid.UUID) uuid.UUID {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: projectID, Type: "chat", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return task.ID
}

func TestSupabaseRealtimePublication(t *testing.T) {
	t.Parallel()
	replicaIdentity := func(pool *pgxpool.Pool) string {
		t.Helper()
		var ident string
		if err := pool.QueryRow(t.Context(), `SELECT relreplident::text FROM pg_class WHERE oid = 'agent_events'::regclass`).Scan(&ident); err != nil {
			t.Fatal(err)
		}
		return ident
	}
	published := func(pool *pgxpool.Pool) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
			WHERE pubname = 'supabase_realtime' AND tablename = 'agent_events')`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// Without the publication the migration skipped it cleanly.
	plain := dbtest.New(t)
	if published(plain) || replicaIdentity(plain) != "d" {
		t.Fatalf("without supabase_realtime: published %v, replica identity %q, want false, d", published(plain), replicaIdentity(plain))
	}

	// As on Supabase: the publication exists when the migrations run.
	supabase, err := pgxpool.New(t.Context(), dbtest.NewEmptyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(supabase.Close)
	if _, err := supabase.Exec(t.Context(), `CREATE PUBLICATION supabase_realtime`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run finds nothing to do
		if err := agentsql.Migrate(t.Context(), supabase); err != nil {
			t.Fatalf("migrate with supabase_realtime: %v", err)
		}
	}
	if !published(supabase) || replicaIdentity(supabase) != "f" {
		t.Fatalf("with supabase_realtime: published %v, replica identity %q, want true, f", published(supabase), replicaIdentity(supabase))
	}
}

// TestProjectEventsCommitOrder: ids that commit out of order never make a
// reader that keeps its last cursor skip an event.
func TestProjectEventsCommitOrder(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	projectID := uuid.New()
	taskA, taskB := newTask(t, pool, projectID), newTask(t, pool, projectID)

	insert := func(tx pgx.Tx, task uuid.UUID) int64 {
		t.Helper()
		rows, err := agentsql.InsertEvents(ctx, tx, task, projectID, []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"x"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return rows[0].ID
	}
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	var cur agentsql.ProjectCursor
	var got []int64
	read := func() bool {
		t.Helper()
		rows, held, err := agentsql.ProjectEventsAfter(ctx, pool, projectID, cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got = append(got, r.ID)
			cur = r.Cursor
		}
		return held
	}

	tests := []struct {
		name string
		run  func() (want []int64)
	}{
		{name: "LaterIDCommitsFirst", run: func() []int64 {
			// A takes id n, B takes id n+1 and commits first.
			a, b := begin(), begin()
			idA := insert(a, taskA)
			idB := insert(b, taskB)
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if held := read(); !held {
				t.Error("B's event not reported held while A is open")
			}
			if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return []int64{idA, idB}
		}},
		{name: "OlderTransactionTakesLaterID", run: func() []int64 {
			// A has the older xid but takes the later id; B stays open.
			a := begin()
			if _, err := a.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
				t.Fatal(err)
			}
			b := begin()
			idB := insert(b, taskB)
			idA := insert(a, taskA)
			if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			read()
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return []int64{idA, idB}
		}},
	}
	for _, tt := range tests {
		// Sequential: they share the reader's cursor.
		got = nil
		want := tt.run()
		// Held until every transaction older than the events ends, other
		// tests' too: at load 30 that once took longer than 10 s.
		deadline := time.Now().Add(60 * time.Second)
		for read() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling: xmin advances without a signal
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("%s: reader got ids %v, want %v", tt.name, got, want)
		}
	}
}
