package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage/changeset"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/worker"
)

// TestCrashWhileApplyingIsFinishedByTheNextAttempt: an attempt that
// decided to apply its build (the change set marked applying, with the
// task's result) and died before writing a file is finished by the next
// attempt, which the claim tells the set is applying: the files land, the
// task succeeds with the recorded result, and the model is not asked again.
func TestCrashWhileApplyingIsFinishedByTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := setup(t, setupOpts{responder: scripted.Queue(), // the model must not be called
		workerConfig: worker.Config{Lease: 2 * time.Second}})
	project := uuid.New()

	// The first attempt, by hand: a build task with no River job of its
	// own, claimed by a worker that stages a.txt and marks the set applying.
	id := h.insertWithoutJob(t, project, "build", "write a.txt")
	c, err := agentsql.ClaimAndStart(ctx, h.pool, id, 999, "dead-worker", time.Minute, true, 0)
	if err != nil || !c.Claimed || c.ChangeSet == nil || !c.ChangeSet.Created {
		t.Fatalf("first claim = %+v, %v", c, err)
	}
	f := agentsql.Fence{TaskID: id, Epoch: c.Task.Fence}
	set := changeset.Opened(h.pool, h.store, f, project, true)
	if _, err := set.Write(ctx, project.String(), "a.txt", []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	result, err := json.Marshal(handlers.Result{Summary: "wrote a.txt", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := agentsql.MarkChangeSetApplying(ctx, h.pool, f, result, []agentsql.Prior{{Path: "a.txt", Known: true}}); err != nil {
		t.Fatal(err)
	}
	// It dies here: its lease lapses, and a worker's sweep takes the task over.
	if _, err := h.pool.Exec(ctx, `UPDATE ai_tasks SET lease_expires_at = now() - interval '1 second'`+dbtest.AsWorker+`WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s; want succeeded", task.Status, task.Error)
	}
	var got handlers.Result
	if err := json.Unmarshal(task.Result, &got); err != nil || got.Summary != "wrote a.txt" {
		t.Fatalf("result = %s (%v); want the one the first attempt recorded", task.Result, err)
	}
	content, _, err := h.store.Read(context.WithoutCancel(ctx), project.String(), "a.txt")
	if err != nil || string(content) != "hello\n" {
		t.Fatalf("a.txt = %q, %v; want the staged content", content, err)
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Fatalf("the model got %d requests; the build was decided before the crash", n)
	}
	if status, _, err := agentsql.ChangeSetState(ctx, h.pool, id); err != nil || status != agentsql.ChangeSetApplied {
		t.Fatalf("change set status = %q (%v), want applied", status, err)
	}
}
