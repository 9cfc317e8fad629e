package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// retentionService is a worker service that is never started: the tests
// run its retention pass themselves.
func retentionService(t *testing.T, pool *pgxpool.Pool, rc worker.RetentionConfig) *worker.Service {
	t.Helper()
	svc, err := worker.New(pool, nil, worker.Config{Retention: rc})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// oldTask inserts a task in status with events on the UTC day daysAgo days
// ago (its own partition, made as the leader makes it) and returns it and
// the partition's name.
func oldTask(t *testing.T, pool *pgxpool.Pool, status string, daysAgo int) (uuid.UUID, string) {
	t.Helper()
	ctx := t.Context()
	var task uuid.UUID
	project := uuid.New()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// No River job: nothing runs these tasks.
	if _, err := conn.Exec(ctx, `SET agentworker.skip_enqueue = 'on'`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET agentworker.skip_enqueue`)
	if err := conn.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'old') RETURNING id`, project).Scan(&task); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().AddDate(0, 0, -daysAgo).Truncate(24 * time.Hour)
	if _, err := conn.Exec(ctx, `SELECT agentworker_create_event_partition($1::date)`, day); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload, created_at)
		SELECT $1, $2, 'log', jsonb_build_object('message', n), $3::timestamptz + n * interval '1 minute'
		FROM generate_series(1, 3) n`, task, project, day); err != nil {
		t.Fatal(err)
	}
	if status == "succeeded" || status == "failed" || status == "blocked" {
		if _, err := conn.Exec(ctx, `UPDATE ai_tasks SET status = 'running' WHERE id = $1`, task); err != nil {
			t.Fatal(err)
		}
	}
	if status != "queued" {
		if _, err := conn.Exec(ctx, `UPDATE ai_tasks SET status = $2, finished_at = $3 WHERE id = $1`, task, status, day); err != nil {
			t.Fatal(err)
		}
	}
	return task, "agent_events_p" + day.Format("20060102")
}

func partitionExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func eventCount(t *testing.T, pool *pgxpool.Pool, task uuid.UUID) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM agent_events WHERE task_id = $1`, task).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorder is a BeforeDrop hook that records the tasks it was given, and
// fails while fail is set.
type recorder struct {
	mu    sync.Mutex
	calls [][]uuid.UUID
	fail  error
}

func (r *recorder) BeforeDrop(_ context.Context, ids []uuid.UUID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, slices.Clone(ids))
	return r.fail
}

// TestRetentionDropsOldPartitionAfterHook: a day past EVENTS_RETENTION whose
// tasks are finished is dropped, after the hook was given those tasks; a
// younger day stays.
func TestRetentionDropsOldPartitionAfterHook(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	oldA, part := oldTask(t, pool, "cancelled", 40)
	young, youngPart := oldTask(t, pool, "cancelled", 10)
	var rec recorder
	svc := retentionService(t, pool, worker.RetentionConfig{Events: 30 * 24 * time.Hour, BeforeDrop: rec.BeforeDrop})

	rep, err := svc.Retain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Dropped, []string{part}) {
		t.Errorf("dropped %v, want [%s]", rep.Dropped, part)
	}
	if len(rec.calls) != 1 || !slices.Equal(rec.calls[0], []uuid.UUID{oldA}) {
		t.Errorf("BeforeDrop got %v, want one call with [%s]", rec.calls, oldA)
	}
	if partitionExists(t, pool, part) || eventCount(t, pool, oldA) != 0 {
		t.Errorf("partition %s still there (or its task's events)", part)
	}
	if !partitionExists(t, pool, youngPart) || eventCount(t, pool, young) != 3 {
		t.Errorf("the younger partition %s lost events", youngPart)
	}
}

// TestRetentionHookFailureKeepsPartition: when BeforeDrop fails, the
// partition and its events stay, and the next pass tries again.
func TestRetentionHookFailureKeepsPartition(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task, part := oldTask(t, pool, "failed", 45)
	rec := recorder{fail: errors.New("archive store unreachable")}
	svc := retentionService(t, pool, worker.RetentionConfig{Events: 30 * 24 * time.Hour, BeforeDrop: rec.BeforeDrop})

	rep, err := svc.Retain(t.Context())
	if !errors.Is(err, rec.fail) {
		t.Fatalf("Retain: %v, want the hook's error", err)
	}
	if len(rep.Dropped) != 0 || !slices.Contains(rep.Kept, part) {
		t.Errorf("report %+v, want %s kept", rep, part)
	}
	if !partitionExists(t, pool, part) || eventCount(t, pool, task) != 3 {
		t.Fatalf("partition %s or its events went although the hook failed", part)
	}

	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	if rep, err = svc.Retain(t.Context()); err != nil || !slices.Equal(rep.Dropped, []string{part}) {
		t.Fatalf("second pass: %+v, %v; want %s dropped", rep, err, part)
	}
	if len(rec.calls) != 2 {
		t.Errorf("BeforeDrop called %d times, want twice (once a pass)", len(rec.calls))
	}
}

// TestRetentionKeepsPartitionOfUnfinishedTask: a day past the retention
// holding an event of a task that is not finished stays (logged) until the
// task finishes; the hook is not called meanwhile.
func TestRetentionKeepsPartitionOfUnfinishedTask(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task, part := oldTask(t, pool, "queued", 50)
	var rec recorder
	svc := retentionService(t, pool, worker.RetentionConfig{Events: 30 * 24 * time.Hour, BeforeDrop: rec.BeforeDrop})

	rep, err := svc.Retain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Dropped) != 0 || !slices.Contains(rep.Kept, part) || len(rec.calls) != 0 {
		t.Fatalf("report %+v, hook calls %v; want %s kept and no hook call", rep, rec.calls, part)
	}
	if eventCount(t, pool, task) != 3 {
		t.Fatalf("the unfinished task lost events")
	}

	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'cancelled' WHERE id = $1`, task); err != nil {
		t.Fatal(err)
	}
	if rep, err = svc.Retain(t.Context()); err != nil || !slices.Equal(rep.Dropped, []string{part}) {
		t.Fatalf("after the task finished: %+v, %v; want %s dropped", rep, err, part)
	}
}

// TestRetentionDeletesOldFinishedTasks: TASKS_RETENTION deletes finished
// tasks that finished before it, with their runs and events, in batches;
// younger and unfinished tasks stay.
func TestRetentionDeletesOldFinishedTasks(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var old []uuid.UUID
	for range 5 {
		id, _ := oldTask(t, pool, "succeeded", 100)
		old = append(old, id)
	}
	recent, _ := oldTask(t, pool, "succeeded", 2)
	unfinished, _ := oldTask(t, pool, "queued", 100)
	for _, id := range append(slices.Clone(old), recent) {
		if _, err := pool.Exec(t.Context(), `WITH r AS (INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, tokens_out, cost)
			VALUES ($1, 1, $2, 'running', 7, 3, 0.5) RETURNING id)
			SELECT 1 FROM r`, id, id.String()+"/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `UPDATE task_runs SET status = 'succeeded', finished_at = (SELECT finished_at FROM ai_tasks WHERE id = $1)
			WHERE task_id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	// A run of a task that stays, deleted on its own, is rolled up too.
	if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, cost)
		VALUES ($1, 2, $2, 'running', 11, 0.25)`, recent, recent.String()+"/2"); err != nil {
		t.Fatal(err)
	}
	usageBefore := usage(t, pool)
	if _, err := pool.Exec(t.Context(), `DELETE FROM task_runs WHERE task_id = $1 AND attempt = 2`, recent); err != nil {
		t.Fatal(err)
	}
	svc := retentionService(t, pool, worker.RetentionConfig{Tasks: 90 * 24 * time.Hour, DeleteBatch: 2})

	rep, err := svc.Retain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.TasksDeleted != len(old) {
		t.Errorf("deleted %d tasks, want %d", rep.TasksDeleted, len(old))
	}
	for _, id := range old {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM ai_tasks WHERE id = $1) + (SELECT count(*) FROM task_runs WHERE task_id = $1)
			+ (SELECT count(*) FROM agent_events WHERE task_id = $1)`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("task %s left %d rows (task, runs, events)", id, n)
		}
	}
	for _, id := range []uuid.UUID{recent, unfinished} {
		if eventCount(t, pool, id) != 3 {
			t.Errorf("task %s lost its events", id)
		}
	}
	if after := usage(t, pool); after != usageBefore {
		t.Errorf("usage changed when tasks and runs were deleted:\nbefore %s\nafter  %s", usageBefore, after)
	}
	var rolled int
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(runs), 0) FROM usage_rollup`).Scan(&rolled); err != nil || rolled != len(old)+1 {
		t.Errorf("usage_rollup holds %d runs (%v), want %d", rolled, err, len(old)+1)
	}
}

// usage is both usage views, every row, as text.
func usage(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var out string
	if err := pool.QueryRow(t.Context(), `SELECT
		(SELECT coalesce(string_agg(format('%s %s %s %s %s %s %s', project_id, day, model, runs, tokens_in, tokens_out, cost), '; ' ORDER BY project_id, day, model), '') FROM project_usage_daily)
		|| ' | ' ||
		(SELECT coalesce(string_agg(format('%s %s %s %s %s %s', day, model, runs, tokens_in, tokens_out, cost), '; ' ORDER BY day, model), '') FROM usage_daily)`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if out == " | " {
		t.Fatal("no usage to compare")
	}
	return out
}

// TestLeaderCreatesPartitionsAhead: a started service's leader makes the
// partitions of the days ahead (the periodic job runs on start), and moves
// the events that landed in the default partition into their day's.
func TestLeaderCreatesPartitionsAhead(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	// An event for a day no partition covers lands in the default partition.
	far := time.Now().UTC().AddDate(0, 0, 20).Truncate(24 * time.Hour)
	farPart := "agent_events_p" + far.Format("20060102")
	var where string
	if err := pool.QueryRow(ctx, `INSERT INTO agent_events (project_id, type, created_at) VALUES (gen_random_uuid(), 'log', $1)
		RETURNING tableoid::regclass::text`, far.Add(time.Hour)).Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != "agent_events_default" {
		t.Fatalf("the event landed in %s, want agent_events_default", where)
	}

	svc, err := worker.New(pool, nil, worker.Config{Retention: worker.RetentionConfig{PartitionsAhead: 6}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	ahead := "agent_events_p" + time.Now().UTC().AddDate(0, 0, 6).Format("20060102")
	poll.Until(t, fmt.Sprintf("partitions %s and %s", ahead, farPart), 30*time.Second, func() bool {
		return partitionExists(t, pool, ahead) && partitionExists(t, pool, farPart)
	})
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM agent_events WHERE created_at = $1`, far.Add(time.Hour)).Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != farPart {
		t.Errorf("the event is in %s, want it moved to %s", where, farPart)
	}
	parts, err := agentsql.EventPartitions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 8 {
		t.Errorf("partitions %v, want today's, 6 ahead and the far day's", parts)
	}
}

// TestRetentionKeepsEverythingByDefault: with neither retention set (keep),
// a pass only makes partitions: old days and old finished tasks stay.
func TestRetentionKeepsEverythingByDefault(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task, part := oldTask(t, pool, "cancelled", 400)
	rep, err := retentionService(t, pool, worker.RetentionConfig{}).Retain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Dropped) != 0 || rep.TasksDeleted != 0 || !partitionExists(t, pool, part) || eventCount(t, pool, task) != 3 {
		t.Errorf("report %+v: want nothing dropped or deleted, %s and its events kept", rep, part)
	}
}

// TestRetentionDeletesOldAuditRecords: audit_log rows older than the audit
// retention are deleted in batches, at most MaxDeleteBatches a pass, the
// rest on the next; newer rows stay; without a retention none goes.
func TestRetentionDeletesOldAuditRecords(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO audit_log (at, actor, action, resource, reason)
		SELECT now() - make_interval(days => d), 'user:' || d, 'POST /v1/tasks', '/v1/tasks', 'forbidden'
		FROM unnest(ARRAY[100, 120, 200, 300, 365, 89, 1]) d`); err != nil {
		t.Fatal(err)
	}
	actors := func() []string {
		t.Helper()
		recs, err := agentsql.AuditLog(ctx, pool, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Actor)
		}
		return out
	}
	if rep, err := retentionService(t, pool, worker.RetentionConfig{}).Retain(ctx); err != nil || rep.AuditDeleted != 0 || len(actors()) != 7 {
		t.Fatalf("without an audit retention: %+v, %v, %v left; want all 7", rep, err, actors())
	}
	svc := retentionService(t, pool, worker.RetentionConfig{Audit: 90 * 24 * time.Hour, DeleteBatch: 2, MaxDeleteBatches: 2})
	for pass, want := range []struct {
		deleted int
		left    []string
	}{{4, []string{"user:100", "user:89", "user:1"}}, {1, []string{"user:89", "user:1"}}, {0, []string{"user:89", "user:1"}}} {
		rep, err := svc.Retain(ctx)
		if err != nil || rep.AuditDeleted != want.deleted || !slices.Equal(actors(), want.left) {
			t.Errorf("pass %d: deleted %d (%v), left %v; want %d deleted (oldest first), %v left", pass+1, rep.AuditDeleted, err, actors(), want.deleted, want.left)
		}
	}
}
