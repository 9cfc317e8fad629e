package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestOneProjectCannotStarveAnother: with every slot busy and one
// project's 1,000 tasks queued, another project's task inserted with SQL
// and a third's submitted from Go start among the next tasks the worker
// takes, not after the backlog, without a per-project cap.
func TestOneProjectCannotStarveAnother(t *testing.T) {
	t.Parallel()
	const concurrency = 4
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	h := setup(t, setupOpts{concurrency: concurrency, responder: scripted.Func(func(req *scripted.Request) scripted.Reply {
		if _, msg := req.LastUserMessage(); msg == "hold" {
			<-release
		}
		return llmtest.Text("done")
	})})
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	for range concurrency {
		h.insertTask(t, a, "chat", "hold")
	}
	poll.Until(t, "the holders to fill the worker's slots", 30*time.Second, func() bool {
		var n int
		err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE status = 'running'`).Scan(&n)
		return err == nil && n == concurrency
	})
	if _, err := h.pool.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT $1, 'chat', 'backlog' FROM generate_series(1, 1000)`, a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The backlog left is not worked: its jobs go, so the worker stops at once.
		_, _ = h.pool.Exec(context.WithoutCancel(t.Context()), `DELETE FROM river_job WHERE state = 'available'`)
	})
	viaSQL := h.insertTask(t, b, "chat", "other")
	viaGo, err := h.svc.Submit(t.Context(), agentsql.NewTask{ProjectID: c, Type: "chat", Prompt: "other"})
	if err != nil {
		t.Fatal(err)
	}
	free()

	// Before, the two waited for the whole backlog: stop looking once
	// far more of it started than there are slots.
	var waiting, backlogStarted int
	poll.Until(t, "the other projects' tasks to start, or 100 of the backlog's", 60*time.Second, func() bool {
		err := h.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE id = ANY($1) AND started_at IS NULL),
			count(*) FILTER (WHERE prompt = 'backlog' AND started_at IS NOT NULL) FROM ai_tasks`,
			[]uuid.UUID{viaSQL, viaGo.ID}).Scan(&waiting, &backlogStarted)
		return err == nil && (waiting == 0 || backlogStarted >= 100)
	})
	if waiting > 0 {
		t.Fatalf("%d of the other projects' 2 tasks not started after %d of the backlog's 1,000 started", waiting, backlogStarted)
	}
	for _, id := range []uuid.UUID{viaSQL, viaGo.ID} {
		var before int
		if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks
			WHERE prompt = 'backlog' AND started_at < (SELECT started_at FROM ai_tasks WHERE id = $1)`, id).Scan(&before); err != nil {
			t.Fatal(err)
		}
		// The first fetch after the release takes a slot's worth for each
		// slot freed: the backlog's head, then the newcomers, then the backlog.
		if before > concurrency {
			t.Errorf("task %s started after %d of the backlog's tasks, want at most %d (one fetch)", id, before, concurrency)
		}
	}
}
