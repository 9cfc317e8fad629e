package worker_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/worker"
)

// TestRetentionArchivesBeforeDropAndDelete: with the archive as the hooks,
// as serve wires them, a day past EVENTS_RETENTION is archived and then
// dropped, and its task's timeline reads back the same from the archive;
// once the task is past TASKS_RETENTION its archive goes before its row.
func TestRetentionArchivesBeforeDropAndDelete(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	store := s3test.NewStore(t)
	arch, err := archive.New(pool, store, archive.Config{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	task, part := oldTask(t, pool, "succeeded", 40)
	timeline := func() []string {
		t.Helper()
		var lines []string
		if _, err := events.ReadTimeline(ctx, pool, arch, task, 0, 100, func(ev events.Event) error {
			b, err := json.Marshal(ev)
			lines = append(lines, string(b))
			return err
		}); err != nil {
			t.Fatalf("read the timeline of %s: %v", task, err)
		}
		return lines
	}
	before := timeline()
	if len(before) != 3 {
		t.Fatalf("timeline before: %d events, want 3", len(before))
	}

	drop := worker.RetentionConfig{Events: 30 * 24 * time.Hour, BeforeDrop: arch.ArchiveTasks, BeforeDelete: arch.DeleteArchives}
	rep, err := retentionService(t, pool, drop).Retain(ctx)
	if err != nil || !slices.Equal(rep.Dropped, []string{part}) {
		t.Fatalf("retention: %+v, %v; want %s dropped", rep, err, part)
	}
	if n := eventCount(t, pool, task); n != 0 {
		t.Fatalf("%d rows left after the drop", n)
	}
	if after := timeline(); !slices.Equal(after, before) {
		t.Errorf("archived timeline:\n%v\nwant:\n%v", after, before)
	}

	var project uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT project_id FROM ai_tasks WHERE id = $1`, task).Scan(&project); err != nil {
		t.Fatal(err)
	}
	key := arch.Key(project, task)
	if objs, err := store.ListService(ctx, key); err != nil || len(objs) != 1 {
		t.Fatalf("archive objects at %s: %v, %v; want one", key, objs, err)
	}
	tasks := drop
	tasks.Tasks = 30 * 24 * time.Hour
	if rep, err = retentionService(t, pool, tasks).Retain(ctx); err != nil || rep.TasksDeleted != 1 {
		t.Fatalf("retention: %+v, %v; want the task deleted", rep, err)
	}
	if objs, err := store.ListService(ctx, key); err != nil || len(objs) != 0 {
		t.Errorf("archive objects at %s after the task's delete: %v, %v; want none", key, objs, err)
	}
}

// TestRetentionDeleteHookFailureKeepsTasks: when BeforeDelete fails, the
// batch's tasks stay, and the pass says why.
func TestRetentionDeleteHookFailureKeepsTasks(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a, _ := oldTask(t, pool, "succeeded", 100)
	b, _ := oldTask(t, pool, "failed", 100)
	rec := &recorder{fail: errors.New("archive store unreachable")}
	svc := retentionService(t, pool, worker.RetentionConfig{Tasks: 90 * 24 * time.Hour, BeforeDelete: rec.BeforeDrop})
	rep, err := svc.Retain(t.Context())
	if err == nil || rep.TasksDeleted != 0 {
		t.Fatalf("retention with a failing hook: %+v, %v; want an error and nothing deleted", rep, err)
	}
	for _, id := range []uuid.UUID{a, b} {
		if eventCount(t, pool, id) != 3 {
			t.Errorf("task %s lost its events", id)
		}
	}
	rec.fail = nil
	if rep, err = svc.Retain(t.Context()); err != nil || rep.TasksDeleted != 2 {
		t.Fatalf("retention: %+v, %v; want both deleted", rep, err)
	}
	if got := rec.calls[len(rec.calls)-1]; len(got) != 2 || !slices.Contains(got, a) || !slices.Contains(got, b) {
		t.Errorf("BeforeDelete got %v, want [%s %s]", got, a, b)
	}
}
