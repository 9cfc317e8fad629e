package archive_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

// BenchmarkReadArchiveTail reads the last 10 events of an archived
// timeline of 20,000 events, as a stream resuming near its end does: the
// whole archive is decompressed (gzip cannot seek), one line at a time.
// heap-MB is the live heap after a read, which stays what it was before
// the archive was read: nothing of it is kept.
func BenchmarkReadArchiveTail(b *testing.B) {
	const n = 20000
	pool := dbtest.New(b)
	store := s3test.NewStore(b)
	arch, err := archive.New(pool, store, archive.Config{TempDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	task, err := agentsql.InsertTask(b.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		batch := make([]agentsql.NewEvent, 1000)
		for j := range batch {
			p, _ := json.Marshal(events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("step %d of a long task, with a message of some length", i+j)})
			batch[j] = agentsql.NewEvent{Type: string(events.TypeLog), Payload: p}
		}
		if _, err := agentsql.InsertEvents(b.Context(), pool, task.ID, task.ProjectID, batch); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := agentsql.ControlTask(b.Context(), pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
		b.Fatal(err)
	}
	if err := arch.ArchiveTasks(b.Context(), []uuid.UUID{task.ID}); err != nil {
		b.Fatal(err)
	}
	st, err := agentsql.ReadTaskArchive(b.Context(), pool, task.ID)
	if err != nil {
		b.Fatal(err)
	}
	objs, err := store.ListService(b.Context(), archive.DefaultPrefix)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var ms runtime.MemStats
	for b.Loop() {
		got := 0
		if _, err := arch.ReadArchived(b.Context(), task.ID, st.Seq-10, func(events.Event) error { got++; return nil }); err != nil {
			b.Fatal(err)
		}
		if got != 10 {
			b.Fatalf("read %d events, want 10", got)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(objs[0].Size)/1e6, "archive-MB")
	b.ReportMetric(float64(ms.HeapAlloc)/1e6, "heap-MB")
}

// BenchmarkArchiveTasks archives 40 finished tasks of 60 events each a
// round, as the hook before a partition drop does, at the default
// concurrency; ms/task is the figure to size a drop's archiving with.
func BenchmarkArchiveTasks(b *testing.B) {
	const tasks, perTask = 40, 60
	pool := dbtest.New(b)
	store := s3test.NewStore(b)
	arch, err := archive.New(pool, store, archive.Config{TempDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	newTasks := func() []uuid.UUID {
		ids := make([]uuid.UUID, tasks)
		for i := range ids {
			task, err := agentsql.InsertTask(b.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
			if err != nil {
				b.Fatal(err)
			}
			batch := make([]agentsql.NewEvent, perTask)
			for j := range batch {
				p, _ := json.Marshal(events.ToolCall{ToolName: "read_file", ArgsSummary: fmt.Sprintf("src/file%d.ts", j), Success: true, ResultSummary: "read 120 lines"})
				batch[j] = agentsql.NewEvent{Type: string(events.TypeToolCall), Payload: p}
			}
			if _, err := agentsql.InsertEvents(b.Context(), pool, task.ID, task.ProjectID, batch); err != nil {
				b.Fatal(err)
			}
			if _, err := agentsql.ControlTask(b.Context(), pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
				b.Fatal(err)
			}
			ids[i] = task.ID
		}
		return ids
	}
	for b.Loop() {
		b.StopTimer()
		ids := newTasks()
		b.StartTimer()
		if err := arch.ArchiveTasks(b.Context(), ids); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*tasks), "ms/task")
}
