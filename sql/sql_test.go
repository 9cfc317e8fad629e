package sql_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	// dbtest's database is already migrated; run Migrate from several
	// "replicas" at once: all succeed and none applies anything again.
	url := dbtest.NewURL(t)
	var wg sync.WaitGroup
	results := make([]agentsql.MigrateResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgxpool.New(context.Background(), url)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			results[i], errs[i] = agentsql.MigrateWithResult(context.Background(), pool, nil)
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if len(results[i].Applied) != 0 || len(results[i].RiverVersions) != 0 {
			t.Errorf("replica %d applied %v / river %v on a migrated database", i, results[i].Applied, results[i].RiverVersions)
		}
	}
}

func TestMigrateFreshDatabaseFromSeveralReplicas(t *testing.T) {
	t.Parallel()
	url := dbtest.NewEmptyURL(t)
	var wg sync.WaitGroup
	applied := make([][]string, 3)
	errs := make([]error, 3)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgxpool.New(context.Background(), url)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			res, err := agentsql.MigrateWithResult(context.Background(), pool, nil)
			applied[i], errs[i] = res.Applied, err
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	migrations, _ := agentsql.Migrations()
	if total != len(migrations) {
		t.Fatalf("migrations applied %d times in all, want each once (%d)", total, len(migrations))
	}
}

// TestCanTransition: the Go state machine is the database's table, pair for
// pair.
func TestCanTransition(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	all := []agentsql.Status{agentsql.StatusQueued, agentsql.StatusRunning, agentsql.StatusSucceeded, agentsql.StatusFailed,
		agentsql.StatusBlocked, agentsql.StatusCancelled, agentsql.StatusPaused, agentsql.StatusAwaitingInput, agentsql.StatusWaiting, agentsql.StatusReview,
		agentsql.StatusAwaitingApproval}
	rows, err := pool.Query(t.Context(), `SELECT from_status, to_status FROM agentworker_task_transitions`)
	if err != nil {
		t.Fatal(err)
	}
	legal := map[[2]agentsql.Status]bool{}
	var from, to agentsql.Status
	if _, err := pgx.ForEachRow(rows, []any{&from, &to}, func() error {
		if !slices.Contains(all, from) || !slices.Contains(all, to) {
			t.Errorf("the table moves %s -> %s, a status the test does not know", from, to)
		}
		legal[[2]agentsql.Status{from, to}] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, from := range all {
		for _, to := range all {
			if got := agentsql.CanTransition(from, to); got != legal[[2]agentsql.Status{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %t; the table says %t", from, to, got, !got)
			}
		}
	}
}

func TestClaimIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(jobID int64) (agentsql.Task, bool) {
		t.Helper()
		var got agentsql.Task
		var ok bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c, err := agentsql.ClaimTask(ctx, tx, task.ID, jobID, "test", time.Minute)
			got, ok = c.Task, c.Claimed
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, ok
	}
	if got, ok := claim(1); !ok || got.Status != agentsql.StatusRunning || got.Attempt != 1 {
		t.Fatalf("first claim = %v, %+v", ok, got)
	}
	if _, ok := claim(2); ok {
		t.Fatal("a second job claimed a running task")
	}
	// River retrying the same job after a crash takes it again, under a
	// new fence.
	first := task
	if first, _ = agentsql.GetTask(ctx, pool, task.ID); first.Fence == 0 {
		t.Fatalf("claimed task has fence %d", first.Fence)
	}
	if got, ok := claim(1); !ok || got.Attempt != 2 || got.Fence != first.Fence+1 {
		t.Fatalf("retry of the same job = %v, attempt %d, fence %d after %d", ok, got.Attempt, got.Fence, first.Fence)
	}
	var runs []string
	rows, _ := pool.Query(ctx, "SELECT status FROM task_runs WHERE task_id = $1 ORDER BY attempt", task.ID)
	runs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(runs) != 2 || runs[0] != "interrupted" || runs[1] != "running" {
		t.Fatalf("task_runs = %v, %v", runs, err)
	}
	// Finishing under the first claim's fence is refused.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := agentsql.FinishTask(ctx, tx, agentsql.Fence{TaskID: task.ID, Epoch: first.Fence}, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded"})
		return err
	})
	if !errors.Is(err, agentsql.ErrFenced) {
		t.Fatalf("FinishTask under a stale fence: %v, want ErrFenced", err)
	}
	if _, err := agentsql.GetTask(ctx, pool, uuid.New()); !errors.Is(err, agentsql.ErrTaskNotFound) {
		t.Fatalf("GetTask of a missing id: %v", err)
	}
}

func TestEventSeqPerTask(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent writers to one task: seqs stay gap-free and unique.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, []agentsql.NewEvent{
					{Type: "log", Payload: []byte(`{"level":"info","message":"a"}`)},
					{Type: "log", Payload: []byte(`{"level":"info","message":"b"}`)},
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rows, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 160 {
		t.Fatalf("got %d events, want 160", len(rows))
	}
	for i, r := range rows {
		if *r.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, *r.Seq)
		}
	}
	if rest, _ := agentsql.TaskEventsAfter(ctx, pool, task.ID, 150, 1000); len(rest) != 10 || *rest[0].Seq != 151 {
		t.Fatalf("events after 150: %d", len(rest))
	}
	_, err = agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, []agentsql.NewEvent{{Type: "progress_bar", Payload: []byte(`{}`)}})
	if err == nil {
		t.Fatal("an unknown event type was accepted")
	}
}

func TestTasksEventsAfter(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	var tasks [3]agentsql.Task
	for i, n := range []int{5, 2, 0} {
		task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		tasks[i] = task
		evs := make([]agentsql.NewEvent, n)
		for k := range evs {
			evs[k] = agentsql.NewEvent{Type: "log", Payload: []byte(`{"level":"info","message":"x"}`)}
		}
		if n > 0 {
			if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	type got struct {
		task int
		seq  int
	}
	cases := []struct {
		name    string
		cursors []agentsql.TaskCursor
		limit   int
		want    []got
	}{
		{"none", nil, 10, nil},
		{"in the order given, then seq", []agentsql.TaskCursor{{Task: tasks[1].ID}, {Task: tasks[0].ID, AfterSeq: 3}},
			10, []got{{1, 1}, {1, 2}, {0, 4}, {0, 5}}},
		{"limit per task", []agentsql.TaskCursor{{Task: tasks[0].ID}, {Task: tasks[1].ID}},
			2, []got{{0, 1}, {0, 2}, {1, 1}, {1, 2}}},
		{"nothing new or no events", []agentsql.TaskCursor{{Task: tasks[0].ID, AfterSeq: 5}, {Task: tasks[2].ID}, {Task: uuid.New()}},
			10, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := agentsql.TasksEventsAfter(ctx, pool, tc.cursors, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var have []got
			for _, r := range rows {
				i := slices.IndexFunc(tasks[:], func(task agentsql.Task) bool { return task.ID == *r.TaskID })
				have = append(have, got{i, *r.Seq})
			}
			if !slices.Equal(have, tc.want) {
				t.Fatalf("got %v, want %v", have, tc.want)
			}
		})
	}
}
