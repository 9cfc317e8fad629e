package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// The claim's events are written by the database (agentworker_claim_task),
// in the claim's own statement; they must be what the worker's Go types
// would write, field for field, or the timeline would show something else
// for the claim than for every other stage.
func TestClaimWritesTheStartEvents(t *testing.T) {
	t.Parallel()
	for _, afterCommit := range []bool{true, false} {
		name := map[bool]string{true: "announced after commit", false: "notified in the transaction"}[afterCommit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.New(t)
			listener, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = listener.Close(t.Context()) })
			if _, err := listener.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
				t.Fatal(err)
			}

			task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now().Add(-time.Second)
			c, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 7, "w1", time.Minute, afterCommit, 0)
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now().Add(time.Second)
			if !c.Claimed || c.Task.Attempt != 1 || c.Task.Status != agentsql.StatusRunning {
				t.Fatalf("claim = %+v", c)
			}

			rows, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			want := []events.Payload{
				&events.Progress{Kind: events.KindStageEnter, Stage: handlers.StageClaim},
				&events.AgentPhase{Phase: events.PhaseStarted, Status: string(agentsql.StatusRunning), TaskType: string(agentsql.TypeBuild), Attempt: 1},
				&events.Progress{Kind: events.KindStageExit, Stage: handlers.StageClaim, Message: "attempt 1 on w1"},
			}
			if len(rows) != len(want) {
				t.Fatalf("claim wrote %d events, want %d: %+v", len(rows), len(want), rows)
			}
			for i, row := range rows {
				ev := events.FromRow(row)
				if ev.Seq != i+1 {
					t.Errorf("event %d: seq %d, want %d", i, ev.Seq, i+1)
				}
				got, err := ev.Decode()
				if err != nil {
					t.Fatal(err)
				}
				if p, ok := got.(*events.Progress); ok {
					if p.Timestamp.Before(before) || p.Timestamp.After(after) || p.Timestamp.Location() != time.UTC {
						t.Errorf("event %d: timestamp %v, want UTC between %v and %v", i, p.Timestamp, before, after)
					}
					p.Timestamp = time.Time{}
				}
				gj := mustJSON(t, got)
				if wj := mustJSON(t, want[i]); gj != wj {
					t.Errorf("event %d (%s) = %s, want %s", i, ev.Type, gj, wj)
				}
				if ev.Type != want[i].EventType() {
					t.Errorf("event %d: type %s, want %s", i, ev.Type, want[i].EventType())
				}
				// No field the Go type does not have, none it would write missing.
				var stored map[string]any
				if err := json.Unmarshal(ev.Payload, &stored); err != nil {
					t.Fatal(err)
				}
				var again map[string]any
				if err := json.Unmarshal([]byte(gj), &again); err != nil {
					t.Fatal(err)
				}
				if gk, sk := slices.Sorted(maps.Keys(again)), slices.Sorted(maps.Keys(stored)); !slices.Equal(gk, sk) {
					t.Errorf("event %d: stored fields %v, the Go type writes %v", i, sk, gk)
				}
			}

			// Announced as asked: a marker sent after the claim committed
			// comes first when the claim's statement did not notify.
			if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", agentsql.EventsChannel); err != nil {
				t.Fatal(err)
			}
			n, err := listener.WaitForNotification(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if afterCommit && n.Payload != "marker" {
				t.Errorf("the claim notified in its transaction: %s", n.Payload)
			}
			if !afterCommit {
				var a agentsql.Announcement
				if err := json.Unmarshal([]byte(n.Payload), &a); err != nil || !slices.Contains(a.Tasks, task.ID) {
					t.Errorf("first notification %q, want one naming task %s (%v)", n.Payload, task.ID, err)
				}
			}

			// The holder's next write continues the seqs; a second claim by
			// another job changes nothing and writes nothing.
			rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(c.Task.Fence))
			evs, err := rec.Emit(ctx, events.Log{Level: "info", Message: "next"})
			if err != nil || len(evs) != 1 || evs[0].Seq != 4 {
				t.Fatalf("next write = %+v, %v; want seq 4", evs, err)
			}
			c2, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 8, "w2", time.Minute, afterCommit, 0)
			if err != nil || c2.Claimed {
				t.Fatalf("second claim = %+v, %v; want not claimed", c2, err)
			}
			if rows, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 4, 10); err != nil || len(rows) != 0 {
				t.Fatalf("second claim wrote %d events (%v)", len(rows), err)
			}
		})
	}
}

func TestClaimRefusesAnUnknownEventsMode(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(t.Context(), `SELECT * FROM agentworker_claim_task($1, 1, 'w', '1 minute', 'later')`, task.ID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Fatalf("claim with events mode 'later' = %v, want SQLSTATE 22023", err)
	}
	var status string
	if err := pool.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, task.ID).Scan(&status); err != nil || status != "queued" {
		t.Fatalf("task status %q (%v), want it still queued", status, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClaimOpensTheChangeSet: a build's claim opens its change set in the
// claim's own statement, as OpenChangeSet would (created, or the status of
// the set an earlier attempt left); other claims leave change sets alone.
func TestClaimOpensTheChangeSet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	insert := func(typ agentsql.TaskType) agentsql.Task {
		t.Helper()
		task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: typ, Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	changeSet := func(id uuid.UUID) (project uuid.UUID, status string, ok bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT project_id, status FROM change_sets WHERE task_id = $1`, id).Scan(&project, &status)
		if errors.Is(err, pgx.ErrNoRows) {
			return uuid.Nil, "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return project, status, true
	}

	t.Run("BuildCreatesIt", func(t *testing.T) {
		t.Parallel()
		task := insert(agentsql.TypeBuild)
		c, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 7, "w1", time.Minute, true, 0)
		if err != nil || !c.Claimed {
			t.Fatalf("claim = %+v, %v", c, err)
		}
		if c.ChangeSet == nil || *c.ChangeSet != (agentsql.OpenedChangeSet{Status: agentsql.ChangeSetOpen, Created: true}) {
			t.Fatalf("claim's change set = %+v, want open and created", c.ChangeSet)
		}
		if project, status, ok := changeSet(task.ID); !ok || project != task.ProjectID || status != agentsql.ChangeSetOpen {
			t.Fatalf("change set row = %v %q (exists %v), want the task's project, open", project, status, ok)
		}

		// The same job claims again (River retrying it after a crash): the
		// set is the earlier attempt's, whatever it became.
		if _, err := pool.Exec(ctx, `UPDATE change_sets SET status = 'applying' WHERE task_id = $1`, task.ID); err != nil {
			t.Fatal(err)
		}
		again, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 7, "w2", time.Minute, true, 0)
		if err != nil || !again.Claimed || again.Task.Fence == c.Task.Fence {
			t.Fatalf("claim again = %+v, %v; want claimed under a new fence", again, err)
		}
		if again.ChangeSet == nil || *again.ChangeSet != (agentsql.OpenedChangeSet{Status: agentsql.ChangeSetApplying, Created: false}) {
			t.Fatalf("second claim's change set = %+v, want applying, not created", again.ChangeSet)
		}
	})
	t.Run("NotClaimedOpensNothing", func(t *testing.T) {
		t.Parallel()
		task := insert(agentsql.TypeBuild)
		if _, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 7, "w1", time.Minute, true, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `DELETE FROM change_sets WHERE task_id = $1`, task.ID); err != nil {
			t.Fatal(err)
		}
		c, err := agentsql.ClaimAndStart(ctx, pool, task.ID, 8, "w2", time.Minute, true, 0)
		if err != nil || c.Claimed || c.ChangeSet != nil {
			t.Fatalf("claim by another job = %+v, %v; want not claimed, no change set", c, err)
		}
		if _, _, ok := changeSet(task.ID); ok {
			t.Fatal("a claim that claimed nothing opened a change set")
		}
	})
	for _, tc := range []struct {
		name  string
		typ   agentsql.TaskType
		start bool
	}{
		{"ChatHasNone", agentsql.TypeChat, true},
		{"PlanHasNone", agentsql.TypePlan, true},
		{"ClaimTaskLeavesItToTheHandler", agentsql.TypeBuild, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task := insert(tc.typ)
			claim := agentsql.ClaimTask
			if tc.start {
				claim = func(ctx context.Context, db agentsql.DBTX, id uuid.UUID, job int64, w string, lease time.Duration) (agentsql.Claim, error) {
					return agentsql.ClaimAndStart(ctx, db, id, job, w, lease, true, 0)
				}
			}
			c, err := claim(ctx, pool, task.ID, 7, "w1", time.Minute)
			if err != nil || !c.Claimed || c.ChangeSet != nil {
				t.Fatalf("claim = %+v, %v; want claimed without a change set", c, err)
			}
			if _, _, ok := changeSet(task.ID); ok {
				t.Fatal("the claim opened a change set")
			}
		})
	}
}
