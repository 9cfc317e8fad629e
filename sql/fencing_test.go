package sql_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// claimed returns a task claimed by job 1 and the claim's fence.
func claimed(t testing.TB, pool *pgxpool.Pool) (agentsql.Task, agentsql.Fence) {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(t.Context(), tx, task.ID, 1, "test", 30*time.Second)
		task = c.Task
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return task, agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
}

func eventCount(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (n, maxSeq int) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `SELECT count(*), coalesce(max(seq), 0) FROM agent_events WHERE task_id = $1`, id).Scan(&n, &maxSeq); err != nil {
		t.Fatal(err)
	}
	return n, maxSeq
}

// TestStaleFenceRefusesEveryWrite: after the task was cancelled, or claimed
// again, each write of the old holder is refused with ErrFenced and
// changes nothing.
func TestStaleFenceRefusesEveryWrite(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	for name, lose := range map[string]func(t *testing.T, task agentsql.Task){
		"Cancelled": func(t *testing.T, task agentsql.Task) {
			if _, err := agentsql.ControlTask(t.Context(), pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
				t.Fatal(err)
			}
		},
		"ClaimedAgain": func(t *testing.T, task agentsql.Task) {
			err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				c, err := agentsql.ClaimTask(t.Context(), tx, task.ID, 1, "other", 30*time.Second)
				if !c.Claimed {
					t.Error("the same job could not claim the task again")
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			task, f := claimed(t, pool)
			if _, _, err := agentsql.OpenChangeSet(ctx, pool, f, task.ProjectID); err != nil {
				t.Fatal(err)
			}
			if err := agentsql.PutChangeEntry(ctx, pool, f, agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			lose(t, task)
			n0, _ := eventCount(t, pool, task.ID)
			epoch := f.Epoch
			writes := map[string]func() error{
				"events": func() error {
					_, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &epoch,
						Key: uuid.New(), Events: []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"stale"}`)}}})
					return err
				},
				"put": func() error {
					return agentsql.PutChangeEntry(ctx, pool, f, agentsql.ChangeEntry{Path: "b.txt", Op: agentsql.ChangeWrite, Content: []byte("b")})
				},
				"reset": func() error { return agentsql.ResetChangeSet(ctx, pool, f) },
				"mark":  func() error { return agentsql.MarkChangeSetApplying(ctx, pool, f, json.RawMessage(`{}`), nil) },
				"entry": func() error { return agentsql.MarkChangeEntryApplied(ctx, pool, f, "a.txt") },
				"finish set": func() error {
					return agentsql.FinishChangeSet(ctx, pool, f, agentsql.ChangeSetDiscarded, false)
				},
				"checkpoint": func() error {
					_, err := agentsql.SaveCheckpoint(ctx, pool, f, agentsql.Checkpoint{TaskID: task.ID, Attempt: 1, Iteration: 1,
						Messages: json.RawMessage(`[]`), State: json.RawMessage(`{}`)}, agentsql.Spend{})
					return err
				},
				"decision": func() error {
					_, err := agentsql.RecordDecision(ctx, pool, f, "d1", agentsql.DecisionAccepted, nil)
					return err
				},
				"lease": func() error { return agentsql.RenewLease(ctx, pool, f, 30e9) },
				"finish task": func() error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := agentsql.FinishTask(ctx, tx, f, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded"})
						return err
					})
				},
				"retry": func() error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						return agentsql.ScheduleRetry(ctx, tx, f, "x", "x", 0, agentsql.Spend{})
					})
				},
			}
			for what, write := range writes {
				if err := write(); !errors.Is(err, agentsql.ErrFenced) {
					t.Errorf("%s under a stale fence = %v, want ErrFenced", what, err)
				}
			}
			if released, err := agentsql.ReleaseTask(ctx, pool, f, "stale"); err != nil || released {
				t.Errorf("release under a stale fence = %v, %v", released, err)
			}
			if n, _ := eventCount(t, pool, task.ID); n != n0 {
				t.Errorf("%d events written under a stale fence", n-n0)
			}
			entries, err := agentsql.ListChangeEntries(ctx, pool, task.ID)
			want := 1
			if name == "Cancelled" {
				want = 0 // the cancel discarded the open set, and a discarded set keeps no staged content
			}
			if err != nil || len(entries) != want || (want == 1 && (entries[0].Path != "a.txt" || entries[0].Applied)) {
				t.Errorf("entries = %+v, %v: changed under a stale fence", entries, err)
			}
			if _, ok, _ := agentsql.LoadCheckpoint(ctx, pool, task.ID); ok {
				t.Error("a checkpoint was written under a stale fence")
			}
		})
	}
}

// TestCancelRefusedWhileApplying: a task whose finished build is being
// applied refuses cancel and pause, with the reason, audited; the apply
// then finishes and the task succeeds.
func TestCancelRefusedWhileApplying(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	if _, _, err := agentsql.OpenChangeSet(ctx, pool, f, task.ProjectID); err != nil {
		t.Fatal(err)
	}
	if err := agentsql.MarkChangeSetApplying(ctx, pool, f, json.RawMessage(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	for _, action := range []agentsql.Action{agentsql.ActionCancel, agentsql.ActionPause} {
		res, err := agentsql.ControlTask(ctx, pool, task.ID, action, agentsql.ControlOpts{Actor: "tester"})
		if !errors.Is(err, agentsql.ErrIllegalTransition) || res.Status != agentsql.StatusRunning {
			t.Fatalf("%s while applying = %+v, %v; want rejected, still running", action, res, err)
		}
		if a := lastAudit(t, pool, task.ID); a.Metadata["outcome"] != "rejected" || a.Metadata["error"] == nil {
			t.Errorf("audit of the refused %s = %+v", action, a)
		}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := agentsql.FinishChangeSet(ctx, tx, f, agentsql.ChangeSetApplied, false); err != nil {
			return err
		}
		_, err := agentsql.FinishTask(ctx, tx, f, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEventBatchIsIdempotent: a batch sent again with its key (its commit
// succeeded, the reply was lost) writes nothing; a seq the writer supplies
// is ignored, so the next insert is not broken by it.
func TestEventBatchIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	n0, _ := eventCount(t, pool, task.ID)
	b := agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch, Key: uuid.New(),
		Events: []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"1"}`)}, {Type: "log", Payload: []byte(`{"level":"info","message":"2"}`)}}}
	for i := range 2 {
		rows, err := agentsql.InsertEventBatch(ctx, pool, b)
		if err != nil || len(rows) != 2-2*i {
			t.Fatalf("write %d of the batch: %d rows, %v", i+1, len(rows), err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type) VALUES ($1, $2, 1000, 'log')`, task.ID, task.ProjectID); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, []agentsql.NewEvent{{Type: "log", Payload: []byte(`{}`)}}); err != nil {
		t.Fatalf("insert after a supplied seq: %v", err)
	}
	if n, maxSeq := eventCount(t, pool, task.ID); n != n0+4 || maxSeq != n {
		t.Errorf("%d events, max seq %d: want %d without a gap", n, maxSeq, n0+4)
	}
}

// TestStateMachineGuardsEveryWriter: inserts start queued or paused; only
// a hand-back moves running to queued; a running task without a lease is
// taken over; resume withdraws a pending pause.
func TestStateMachineGuardsEveryWriter(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	// Every status but queued and paused is refused at insert, by the
	// state machine's own check (23514, ai_tasks_status_transition), not by
	// some other error.
	for _, st := range agentsql.Statuses {
		_, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', $2)`, uuid.New(), st)
		if st == agentsql.StatusQueued || st == agentsql.StatusPaused {
			if err != nil {
				t.Errorf("insert of a %s task: %v", st, err)
			}
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "ai_tasks_status_transition" {
			t.Errorf("insert of a %s task = %v, want check_violation ai_tasks_status_transition", st, err)
		}
	}
	task, _ := claimed(t, pool)
	if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET status = 'queued' WHERE id = $1`, task.ID); err == nil {
		t.Error("a plain update moved a running task back to queued")
	}
	// Resume withdraws a pending pause; the task goes on running.
	if res, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionPause, agentsql.ControlOpts{}); err != nil || !res.Pending {
		t.Fatalf("pause = %+v, %v", res, err)
	}
	if res, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionResume, agentsql.ControlOpts{}); err != nil || res.Status != agentsql.StatusRunning {
		t.Fatalf("resume of a pending pause = %+v, %v", res, err)
	}
	if p, err := agentsql.PauseRequested(ctx, pool, task.ID); err != nil || p {
		t.Errorf("pause still requested after resume: %v, %v", p, err)
	}
	// A task set running by hand, without a lease, is taken over.
	other, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET status = 'running' WHERE id = $1`, other.ID); err != nil {
		t.Fatal(err)
	}
	taken, err := agentsql.TakeOverLapsed(ctx, pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tk := range taken {
		found = found || tk.TaskID == other.ID
	}
	if !found {
		t.Errorf("taken over = %+v, want the running task without a lease", taken)
	}
	if got, _ := agentsql.GetTask(ctx, pool, other.ID); got.Status != agentsql.StatusQueued {
		t.Errorf("status after takeover = %s, want queued", got.Status)
	}
}

// TestUsageIsFenced: the spend of a holder whose task was taken over (its
// lease lapsed: the task is queued) is refused and counted nowhere; the
// spend of an attempt stopped by a cancel is its own and is counted.
func TestUsageIsFenced(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	spend := agentsql.Spend{TokensIn: 500, TokensOut: 20, Cost: 1.5}
	tests := []struct {
		name    string
		lose    func(t *testing.T, task agentsql.Task)
		wantErr error
		want    agentsql.Spend
	}{
		{name: "TakenOver", lose: func(t *testing.T, task agentsql.Task) {
			if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET lease_expires_at = now() - interval '1 second'`+dbtest.AsWorker+`WHERE id = $1`, task.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := agentsql.TakeOverLapsed(t.Context(), pool, 100); err != nil {
				t.Fatal(err)
			}
		}, wantErr: agentsql.ErrFenced},
		{name: "Cancelled", lose: func(t *testing.T, task agentsql.Task) {
			if _, err := agentsql.ControlTask(t.Context(), pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
				t.Fatal(err)
			}
		}, want: spend},
		{name: "Held", lose: func(*testing.T, agentsql.Task) {}, want: spend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task, f := claimed(t, pool)
			tt.lose(t, task)
			if err := agentsql.AddRunUsage(t.Context(), pool, f, spend); !errors.Is(err, tt.wantErr) {
				t.Fatalf("add usage = %v, want %v", err, tt.wantErr)
			}
			var onTask, onRun agentsql.Spend
			if err := pool.QueryRow(t.Context(), `SELECT t.tokens_in, t.tokens_out, t.cost, r.tokens_in, r.tokens_out, r.cost
				FROM ai_tasks t JOIN task_runs r ON r.task_id = t.id AND r.attempt = 1 WHERE t.id = $1`, task.ID).
				Scan(&onTask.TokensIn, &onTask.TokensOut, &onTask.Cost, &onRun.TokensIn, &onRun.TokensOut, &onRun.Cost); err != nil {
				t.Fatal(err)
			}
			if onTask != tt.want || onRun != tt.want {
				t.Errorf("usage on the task %+v, on its run %+v; want %+v", onTask, onRun, tt.want)
			}
		})
	}
}

// TestCancelRacesApply: the cancel and the decision to apply reach the
// task at once; whichever holds the task row first wins, and the other
// sees its outcome: a cancel that waited on an apply's uncommitted mark is
// refused (the task succeeds as applied), a mark that waited on a cancel's
// uncommitted move is fenced (the set is discarded, the task cancelled).
// Never both, never neither.
func TestCancelRacesApply(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	// waitingOnLock waits until a statement containing query is blocked on
	// a lock.
	waitingOnLock := func(t *testing.T, what, query string) {
		t.Helper()
		poll.Until(t, what+" to wait for the task's row", 10*time.Second, func() bool {
			var n int
			_ = pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity a
				WHERE a.wait_event_type = 'Lock' AND a.datname = current_database() AND a.query LIKE '%' || $1 || '%'
				AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)`, query).Scan(&n)
			return n > 0
		})
	}
	// One order after the other: each holds two of the pool's connections
	// and polls with a third.
	t.Run("ApplyFirst", func(t *testing.T) {
		ctx := t.Context()
		task, f := claimed(t, pool)
		if _, _, err := agentsql.OpenChangeSet(ctx, pool, f, task.ProjectID); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := agentsql.MarkChangeSetApplying(ctx, tx, f, json.RawMessage(`{}`), nil); err != nil {
			t.Fatal(err)
		}
		cancelled := make(chan error, 1)
		go func() {
			_, err := agentsql.ControlTask(context.WithoutCancel(ctx), pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "racer"})
			cancelled <- err
		}()
		waitingOnLock(t, "the cancel", "control_task")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-cancelled; !errors.Is(err, agentsql.ErrIllegalTransition) {
			t.Fatalf("cancel after the apply was decided = %v, want refused", err)
		}
		if st, _, _ := agentsql.ChangeSetState(ctx, pool, task.ID); st != agentsql.ChangeSetApplying {
			t.Errorf("set = %s, want applying", st)
		}
		if got, _ := agentsql.GetTask(ctx, pool, task.ID); got.Status != agentsql.StatusRunning {
			t.Errorf("task = %s, want running until the apply finishes", got.Status)
		}
	})
	t.Run("CancelFirst", func(t *testing.T) {
		ctx := t.Context()
		task, f := claimed(t, pool)
		if _, _, err := agentsql.OpenChangeSet(ctx, pool, f, task.ProjectID); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := agentsql.ControlTask(ctx, tx, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "racer"}); err != nil {
			t.Fatal(err)
		}
		marked := make(chan error, 1)
		go func() {
			marked <- agentsql.MarkChangeSetApplying(context.WithoutCancel(ctx), pool, f, json.RawMessage(`{}`), nil)
		}()
		waitingOnLock(t, "the apply's mark", "applying")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-marked; !errors.Is(err, agentsql.ErrFenced) {
			t.Fatalf("mark after the cancel = %v, want ErrFenced", err)
		}
		if st, _, _ := agentsql.ChangeSetState(ctx, pool, task.ID); st != agentsql.ChangeSetDiscarded {
			t.Errorf("set = %s, want discarded", st)
		}
		if got, _ := agentsql.GetTask(ctx, pool, task.ID); got.Status != agentsql.StatusCancelled {
			t.Errorf("task = %s, want cancelled", got.Status)
		}
	})
}
