package sql_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// withoutPickup runs fn in a transaction in which inserted tasks get no
// River job, and commits it.
func withoutPickup(t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
		t.Fatal(err)
	}
	fn(tx)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// insertTaskIn creates a task already in status, without a River job.
func insertTaskIn(t *testing.T, pool *pgxpool.Pool, status agentsql.Status) uuid.UUID {
	t.Helper()
	return insertProjectTaskIn(t, pool, uuid.New(), status)
}

// insertProjectTaskIn is insertTaskIn for a task of project.
func insertProjectTaskIn(t *testing.T, pool *pgxpool.Pool, project uuid.UUID, status agentsql.Status) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	withoutPickup(t, pool, func(tx pgx.Tx) {
		// A task starts queued (or paused); other statuses are reached by
		// legal moves, through running where they need it.
		start := agentsql.StatusQueued
		if status == agentsql.StatusPaused {
			start = status
		}
		if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'build', 'x', $2) RETURNING id`,
			project, start).Scan(&id); err != nil {
			t.Fatalf("insert %s task: %v", status, err)
		}
		var path []agentsql.Status
		switch status {
		case agentsql.StatusQueued, agentsql.StatusPaused:
		case agentsql.StatusCancelled, agentsql.StatusRunning:
			path = []agentsql.Status{status}
		default:
			path = []agentsql.Status{agentsql.StatusRunning, status}
		}
		for _, st := range path {
			if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = $2 WHERE id = $1`, id, st); err != nil {
				t.Fatalf("move task to %s: %v", st, err)
			}
		}
	})
	return id
}

type auditEvent struct {
	Level    string         `json:"level"`
	Message  string         `json:"message"`
	Metadata map[string]any `json:"metadata"`
}

func lastAudit(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) auditEvent {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(t.Context(), `SELECT payload FROM agent_events
		WHERE task_id = $1 AND type = 'log' AND payload -> 'metadata' ->> 'audit' = 'true'
		ORDER BY seq DESC LIMIT 1`, id).Scan(&raw); err != nil {
		t.Fatalf("audit event of task %s: %v", id, err)
	}
	var a auditEvent
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestStateMachinesAgreeWithSQL(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	for _, from := range agentsql.Statuses {
		for _, to := range agentsql.Statuses {
			got, err := agentsql.CanTransitionSQL(t.Context(), pool, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if want := agentsql.CanTransition(from, to); got != want {
				t.Errorf("task %s -> %s: SQL says %v, Go says %v", from, to, got, want)
			}
		}
	}
	for _, from := range agentsql.RunStatuses {
		for _, to := range agentsql.RunStatuses {
			got, err := agentsql.CanTransitionRunSQL(t.Context(), pool, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if want := agentsql.CanTransitionRun(from, to); got != want {
				t.Errorf("run %s -> %s: SQL says %v, Go says %v", from, to, got, want)
			}
		}
	}
}

// TestControlEveryActionFromEveryStatus checks every control action against
// every status: applied exactly when Action.Permits (and so CanTransition)
// allows it, refused with ErrIllegalTransition otherwise, and audited either way.
func TestControlEveryActionFromEveryStatus(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	for _, action := range agentsql.Actions {
		for _, from := range agentsql.Statuses {
			t.Run(fmt.Sprintf("%s/%s", action, from), func(t *testing.T) {
				id := insertTaskIn(t, pool, from)
				before, err := agentsql.GetTask(t.Context(), pool, id)
				if err != nil {
					t.Fatal(err)
				}
				opts := agentsql.ControlOpts{Actor: "tester", Answer: "yes"}
				if action == agentsql.ActionApproveCall || action == agentsql.ActionDenyCall {
					// The call waits, whatever the task's status.
					if _, err := pool.Exec(t.Context(), `INSERT INTO tool_approvals (task_id, tool_call_id, project_id, tool_name, arguments)
						SELECT id, 'call_1', project_id, 'write_file', '{}' FROM ai_tasks WHERE id = $1`, id); err != nil {
						t.Fatal(err)
					}
					opts.ToolCallID = "call_1"
				}
				res, err := agentsql.ControlTask(t.Context(), pool, id, action, opts)
				after, gerr := agentsql.GetTask(t.Context(), pool, id)
				if gerr != nil {
					t.Fatal(gerr)
				}
				audit := lastAudit(t, pool, id)
				if audit.Metadata["actor"] != "tester" || audit.Metadata["action"] != string(action) {
					t.Errorf("audit event = %+v", audit)
				}
				if action.Permits(from) {
					if err != nil {
						t.Fatalf("%s of a %s task: %v", action, from, err)
					}
					if action == agentsql.ActionPause && from == agentsql.StatusRunning {
						// The loop pauses itself at its next iteration boundary.
						var requested bool
						if err := pool.QueryRow(t.Context(), `SELECT pause_requested FROM ai_tasks WHERE id = $1`, id).Scan(&requested); err != nil {
							t.Fatal(err)
						}
						if after.Status != agentsql.StatusRunning || !res.Pending || !requested || after.Version <= before.Version {
							t.Errorf("after pause of a running task: status %s, requested %v, result %+v", after.Status, requested, res)
						}
						return
					}
					if after.Status != action.Target() || after.Version <= before.Version || res.Version != after.Version {
						t.Errorf("after %s: status %s version %d (was %d), result %+v", action, after.Status, after.Version, before.Version, res)
					}
					if audit.Metadata["outcome"] != "applied" {
						t.Errorf("audit outcome = %v, want applied", audit.Metadata["outcome"])
					}
					return
				}
				var ce *agentsql.ControlError
				if !errors.Is(err, agentsql.ErrIllegalTransition) || !errors.As(err, &ce) {
					t.Fatalf("%s of a %s task: err = %v, want ErrIllegalTransition", action, from, err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("cannot %s a %s task", action, from)) {
					t.Errorf("error = %q, want it to say what was refused", err)
				}
				if after.Status != from || after.Version != before.Version {
					t.Errorf("refused %s changed the task: %s v%d -> %s v%d", action, from, before.Version, after.Status, after.Version)
				}
				if audit.Metadata["outcome"] != "rejected" || audit.Level != "warn" {
					t.Errorf("audit event = %+v, want a rejected warning", audit)
				}
			})
		}
	}
}

func TestControlRefusals(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)

	t.Run("StaleExpectedVersion", func(t *testing.T) {
		id := insertTaskIn(t, pool, agentsql.StatusQueued)
		task, _ := agentsql.GetTask(t.Context(), pool, id)
		stale := task.Version - 1
		_, err := agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionCancel, agentsql.ControlOpts{ExpectedVersion: &stale})
		if !errors.Is(err, agentsql.ErrVersionConflict) {
			t.Fatalf("err = %v, want ErrVersionConflict", err)
		}
		if a := lastAudit(t, pool, id); a.Metadata["outcome"] != "conflict" {
			t.Errorf("audit = %+v", a)
		}
		current := task.Version
		res, err := agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionCancel, agentsql.ControlOpts{ExpectedVersion: &current})
		if err != nil || res.Status != agentsql.StatusCancelled {
			t.Fatalf("cancel at the current version: %+v, %v", res, err)
		}
	})
	t.Run("AnswerRequired", func(t *testing.T) {
		id := insertTaskIn(t, pool, agentsql.StatusAwaitingInput)
		_, err := agentsql.ControlTask(t.Context(), pool, id, agentsql.ActionAnswer, agentsql.ControlOpts{Answer: "  "})
		if !errors.Is(err, agentsql.ErrInvalidAction) || !strings.Contains(err.Error(), "answer is required") {
			t.Fatalf("err = %v, want ErrInvalidAction", err)
		}
		if a := lastAudit(t, pool, id); a.Metadata["outcome"] != "invalid" {
			t.Errorf("audit = %+v", a)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		_, err := agentsql.ControlTask(t.Context(), pool, uuid.New(), agentsql.ActionPause, agentsql.ControlOpts{})
		if !errors.Is(err, agentsql.ErrTaskNotFound) {
			t.Fatalf("err = %v, want ErrTaskNotFound", err)
		}
	})
	t.Run("DirectUpdateGuarded", func(t *testing.T) {
		id := insertTaskIn(t, pool, agentsql.StatusSucceeded)
		_, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'running' WHERE id = $1`, id)
		if err == nil || !strings.Contains(err.Error(), "illegal task status transition: succeeded -> running") {
			t.Fatalf("direct UPDATE succeeded -> running: err = %v", err)
		}
	})
	t.Run("RunMovesGuarded", func(t *testing.T) {
		id := insertTaskIn(t, pool, agentsql.StatusRunning)
		if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, $2, 'succeeded')`,
			id, id.String()+"/1"); err == nil {
			t.Fatal("a run was inserted as succeeded")
		}
		if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, $2, 'running')`,
			id, id.String()+"/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `UPDATE task_runs SET status = 'succeeded' WHERE task_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(t.Context(), `UPDATE task_runs SET status = 'running' WHERE task_id = $1`, id)
		if err == nil || !strings.Contains(err.Error(), "illegal run status transition: succeeded -> running") {
			t.Fatalf("run succeeded -> running: err = %v", err)
		}
		if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 1, 'other', 'running')`, id); err == nil {
			t.Error("a second run with attempt 1 was accepted")
		}
		if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status) VALUES ($1, 0, 'zero', 'running')`, id); err == nil {
			t.Error("a run with attempt 0 was accepted")
		}
	})
}

// TestPostgRESTCall calls a per-action function the way PostgREST does:
// named arguments, the caller's JWT claims in request.jwt.claims.
func TestPostgRESTCall(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusQueued)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), `SELECT set_config('request.jwt.claims', '{"sub": "carol", "role": "authenticated"}', true)`); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(t.Context(), `SELECT agentworker_pause_task(task_id => $1, expected_version => 1, actor => 'someone-else')`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var res agentsql.ControlResult
	if err := json.Unmarshal(raw, &res); err != nil || res.Outcome != "applied" || res.Status != agentsql.StatusPaused {
		t.Fatalf("result %s, %v", raw, err)
	}
	if a := lastAudit(t, pool, id); a.Metadata["actor"] != "user:carol" {
		t.Errorf("audit actor = %v, want the JWT's subject", a.Metadata["actor"])
	}
	var answered []byte
	if err := pool.QueryRow(t.Context(), `SELECT agentworker_answer_input(task_id => $1, answer => '')`, id).Scan(&answered); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(answered), `"outcome": "invalid"`) {
		t.Errorf("empty answer: %s", answered)
	}
}

// TestApprovalDroppedWhenTaskStops: an approval is for the apply that
// follows it; a task approved, then cancelled, is not approved when
// retried (a retry builds again), and entering review opens an inbox item.
func TestApprovalDroppedWhenTaskStops(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	id := insertTaskIn(t, pool, agentsql.StatusReview)
	var items int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM inbox_items WHERE task_id = $1 AND kind = 'review_requested' AND status = 'open'`, id).Scan(&items); err != nil || items != 1 {
		t.Fatalf("%d open review_requested items (%v), want 1", items, err)
	}
	for _, step := range []struct {
		action   agentsql.Action
		approved bool
	}{{agentsql.ActionApprove, true}, {agentsql.ActionCancel, false}, {agentsql.ActionRetry, false}} {
		if _, err := agentsql.ControlTask(t.Context(), pool, id, step.action, agentsql.ControlOpts{Actor: "tester"}); err != nil {
			t.Fatalf("%s: %v", step.action, err)
		}
		task, err := agentsql.GetTask(t.Context(), pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Approved != step.approved {
			t.Errorf("after %s: approved = %v, want %v", step.action, task.Approved, step.approved)
		}
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM inbox_items WHERE task_id = $1 AND kind = 'review_requested' AND status = 'open'`, id).Scan(&items); err != nil || items != 0 {
		t.Errorf("%d open review_requested items after approve (%v), want 0", items, err)
	}
}
