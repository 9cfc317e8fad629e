package sql_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// projectTasks creates, without River jobs, one task of project in each of
// statuses and returns their ids in that order.
func projectTasks(t *testing.T, pool *pgxpool.Pool, project uuid.UUID, statuses ...agentsql.Status) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(statuses))
	for i, st := range statuses {
		ids[i] = insertProjectTaskIn(t, pool, project, st)
	}
	return ids
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) agentsql.Status {
	t.Helper()
	task, err := agentsql.GetTask(t.Context(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}

func outcomes(res []agentsql.ControlResult) map[uuid.UUID]string {
	m := map[uuid.UUID]string{}
	for _, r := range res {
		m[r.TaskID] = r.Outcome
	}
	return m
}

// TestBroadcastTargets: by default a broadcast moves the project's running
// tasks only; statuses and ids narrow it; an id outside the project is
// not_found; a stale expected version is a conflict; every task found is
// audited like a lone control action.
func TestBroadcastTargets(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	tests := []struct {
		name     string
		action   agentsql.Action
		statuses []agentsql.Status // of the project's tasks
		opts     func(ids []uuid.UUID) agentsql.BroadcastOpts
		want     []string // outcome per task; "" for untouched
	}{
		{"DefaultRunning", agentsql.ActionCancel,
			[]agentsql.Status{agentsql.StatusRunning, agentsql.StatusQueued, agentsql.StatusRunning, agentsql.StatusSucceeded},
			func([]uuid.UUID) agentsql.BroadcastOpts { return agentsql.BroadcastOpts{} },
			[]string{"applied", "", "applied", ""}},
		{"Statuses", agentsql.ActionRetry,
			[]agentsql.Status{agentsql.StatusFailed, agentsql.StatusCancelled, agentsql.StatusRunning},
			func([]uuid.UUID) agentsql.BroadcastOpts {
				return agentsql.BroadcastOpts{Statuses: []agentsql.Status{agentsql.StatusFailed}}
			},
			[]string{"applied", "", ""}},
		{"IdsAnyStatus", agentsql.ActionPause,
			[]agentsql.Status{agentsql.StatusQueued, agentsql.StatusSucceeded, agentsql.StatusQueued},
			func(ids []uuid.UUID) agentsql.BroadcastOpts {
				return agentsql.BroadcastOpts{TaskIDs: ids[:2]}
			},
			[]string{"applied", "rejected", ""}},
		{"ExpectedVersions", agentsql.ActionCancel,
			[]agentsql.Status{agentsql.StatusQueued, agentsql.StatusQueued},
			func(ids []uuid.UUID) agentsql.BroadcastOpts {
				return agentsql.BroadcastOpts{TaskIDs: ids, ExpectedVersions: map[uuid.UUID]int{ids[0]: 999}}
			},
			[]string{"conflict", "applied"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			project := uuid.New()
			ids := projectTasks(t, pool, project, tt.statuses...)
			before := map[uuid.UUID]agentsql.Status{}
			for _, id := range ids {
				before[id] = statusOf(t, pool, id)
			}
			o := tt.opts(ids)
			o.Actor = "operator"
			res, err := agentsql.Broadcast(t.Context(), pool, project, tt.action, o)
			if err != nil {
				t.Fatal(err)
			}
			got := outcomes(res)
			for i, id := range ids {
				if got[id] != tt.want[i] {
					t.Errorf("task %d (%s): outcome %q, want %q", i, tt.statuses[i], got[id], tt.want[i])
				}
				switch tt.want[i] {
				case "":
					if st := statusOf(t, pool, id); st != before[id] {
						t.Errorf("untargeted task %d moved %s -> %s", i, before[id], st)
					}
				default:
					a := lastAudit(t, pool, id)
					if a.Metadata["actor"] != "operator" || a.Metadata["outcome"] != tt.want[i] {
						t.Errorf("task %d audit = %+v", i, a.Metadata)
					}
				}
			}
			if len(res) != len(got) {
				t.Errorf("%d results for %d tasks", len(res), len(got))
			}
		})
	}

	t.Run("OtherProjectsId", func(t *testing.T) {
		project := uuid.New()
		own := projectTasks(t, pool, project, agentsql.StatusRunning)[0]
		other := projectTasks(t, pool, uuid.New(), agentsql.StatusRunning)[0]
		res, err := agentsql.Broadcast(t.Context(), pool, project, agentsql.ActionCancel,
			agentsql.BroadcastOpts{TaskIDs: []uuid.UUID{own, other}})
		if err != nil {
			t.Fatal(err)
		}
		if got := outcomes(res); got[own] != "applied" || got[other] != "not_found" {
			t.Errorf("outcomes = %v", got)
		}
		if st := statusOf(t, pool, other); st != agentsql.StatusRunning {
			t.Errorf("another project's task is %s", st)
		}
	})
	t.Run("AnswerIsNoBroadcast", func(t *testing.T) {
		_, err := agentsql.Broadcast(t.Context(), pool, uuid.New(), agentsql.ActionAnswer, agentsql.BroadcastOpts{})
		if !errors.Is(err, agentsql.ErrInvalidAction) {
			t.Errorf("err = %v, want ErrInvalidAction", err)
		}
	})
}

// TestBroadcastDoesNotWaitForABusyTask: a task whose row another
// transaction holds is answered conflict at once and left alone; the
// others of the batch are applied.
func TestBroadcastDoesNotWaitForABusyTask(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	ids := projectTasks(t, pool, project, agentsql.StatusRunning, agentsql.StatusRunning, agentsql.StatusRunning)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM ai_tasks WHERE id = $1 FOR UPDATE`, ids[1]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := agentsql.Broadcast(ctx, pool, project, agentsql.ActionCancel, agentsql.BroadcastOpts{BatchSize: 2})
	if err != nil {
		t.Fatalf("broadcast waited for the busy task: %v", err)
	}
	got := outcomes(res)
	for i, want := range []string{"applied", "conflict", "applied"} {
		if got[ids[i]] != want {
			t.Errorf("task %d: outcome %q, want %q", i, got[ids[i]], want)
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, pool, ids[1]); st != agentsql.StatusRunning {
		t.Errorf("busy task is %s, want running", st)
	}
}

// TestBroadcastRacesTasksFinishing races a cancel broadcast against its
// tasks finishing on their own (the worker's fenced FinishTask): each task
// ends either cancelled, with the broadcast saying applied and the
// worker's finish fenced, or succeeded, with the broadcast saying rejected
// or conflict — never both, never neither.
func TestBroadcastRacesTasksFinishing(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	const n = 60
	fences := make([]agentsql.Fence, n)
	for i := range fences {
		task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "race"})
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			c, err := agentsql.ClaimTask(t.Context(), tx, task.ID, int64(i+1), "test", time.Minute)
			task = c.Task
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		fences[i] = agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
	}

	finished := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for i, f := range fences {
			finished[i] = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				_, err := agentsql.FinishTask(t.Context(), tx, f, agentsql.Outcome{
					Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: json.RawMessage(`{"ok":true}`)})
				return err
			})
		}
	}()
	var res []agentsql.ControlResult
	var berr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		res, berr = agentsql.Broadcast(t.Context(), pool, project, agentsql.ActionCancel, agentsql.BroadcastOpts{BatchSize: 7})
	}()
	close(start)
	wg.Wait()
	if berr != nil {
		t.Fatal(berr)
	}
	got := outcomes(res)
	var applied, lost int
	for i, f := range fences {
		st := statusOf(t, pool, f.TaskID)
		out, reported := got[f.TaskID]
		switch {
		case reported && out == "applied":
			applied++
			if st != agentsql.StatusCancelled || !errors.Is(finished[i], agentsql.ErrFenced) {
				t.Errorf("task %d: cancel applied, but task is %s and its finish returned %v", i, st, finished[i])
			}
		case reported && (out == "rejected" || out == "conflict"):
			lost++
			if st != agentsql.StatusSucceeded || finished[i] != nil {
				t.Errorf("task %d: broadcast said %s, but task is %s and its finish returned %v", i, out, st, finished[i])
			}
		case !reported:
			// Finished before the broadcast read the running tasks.
			if st != agentsql.StatusSucceeded || finished[i] != nil {
				t.Errorf("task %d: not targeted, but task is %s and its finish returned %v", i, st, finished[i])
			}
		default:
			t.Errorf("task %d: outcome %q", i, out)
		}
	}
	t.Logf("%d tasks: %d cancelled by the broadcast, %d finished first (%d reported)", n, applied, n-applied, lost)
}

// TestBroadcastTenThousand: one broadcast over 10,000 running tasks
// finishes in seconds, a batch per transaction.
func TestBroadcastTenThousand(t *testing.T) {
	pool := dbtest.New(t)
	project := uuid.New()
	const n = 10000
	withoutPickup(t, pool, func(tx pgx.Tx) {
		if _, err := tx.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt)
			SELECT $1, 'build', 'bulk ' || g FROM generate_series(1, $2) g`, project, n); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = 'running' WHERE project_id = $1`, project); err != nil {
			t.Fatal(err)
		}
	})
	begin := time.Now()
	res, err := agentsql.Broadcast(t.Context(), pool, project, agentsql.ActionPause, agentsql.BroadcastOpts{Actor: "operator"})
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, r := range res {
		if r.Outcome == "applied" && r.Pending {
			applied++
		}
	}
	if len(res) != n || applied != n {
		t.Fatalf("%d results, %d pause requests applied; want %d", len(res), applied, n)
	}
	var requested int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE project_id = $1 AND pause_requested`, project).Scan(&requested); err != nil {
		t.Fatal(err)
	}
	if requested != n {
		t.Errorf("%d tasks have a pause requested, want %d", requested, n)
	}
	t.Logf("broadcast pause over %d running tasks: %s (%.0f tasks/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	if took > 2*time.Minute {
		t.Errorf("broadcast over %d tasks took %s", n, took)
	}
}

// TestBroadcastForCaller: the PostgREST entry point acts on the projects
// the caller's token names; on another project each given id is answered
// not_found and nothing changes, as for a missing task; anon may not call it.
func TestBroadcastForCaller(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	own, other := uuid.New(), uuid.New()
	ownTask := projectTasks(t, pool, own, agentsql.StatusRunning)[0]
	otherTask := projectTasks(t, pool, other, agentsql.StatusRunning)[0]
	call := func(role string, project uuid.UUID, ids []uuid.UUID) ([]map[string]any, error) {
		var out []map[string]any
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			if err := asRole(t.Context(), tx, role, claims(role, own)); err != nil {
				return err
			}
			rows, err := tx.Query(t.Context(), `SELECT r FROM agentworker_broadcast_tasks(command => 'cancel',
				project_id => $1, task_ids => $2) AS r`, project, ids)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (map[string]any, error) {
				var m map[string]any
				err := row.Scan(&m)
				return m, err
			})
			return err
		})
		return out, err
	}
	tests := []struct {
		name    string
		role    string
		project uuid.UUID
		ids     []uuid.UUID
		want    string // outcome of the one result, or "denied"
	}{
		{"Anon", "anon", own, []uuid.UUID{ownTask}, "denied"},
		{"OtherProject", "authenticated", other, []uuid.UUID{otherTask}, "not_found"},
		{"OwnProject", "authenticated", own, []uuid.UUID{ownTask}, "applied"},
		{"ServiceRole", "service_role", other, []uuid.UUID{otherTask}, "applied"},
	}
	for _, tt := range tests { // in order: the own task is cancelled once
		res, err := call(tt.role, tt.project, tt.ids)
		if tt.want == "denied" {
			if err == nil {
				t.Errorf("%s: called, want permission denied", tt.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(res) != 1 || res[0]["outcome"] != tt.want {
			t.Errorf("%s: results %v, want one %s", tt.name, res, tt.want)
		}
		if tt.name == "OtherProject" {
			if st := statusOf(t, pool, otherTask); st != agentsql.StatusRunning {
				t.Errorf("%s: task is %s", tt.name, st)
			}
			var audits int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM agent_events WHERE task_id = $1 AND type = 'log'`, otherTask).Scan(&audits); err != nil {
				t.Fatal(err)
			}
			if audits != 0 {
				t.Errorf("%s: %d audit events on another project's task", tt.name, audits)
			}
		}
	}
}
