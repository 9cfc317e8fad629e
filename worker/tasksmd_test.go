package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// TestTasksMD: a project's tasks.md lists its tasks by status with their
// agent, priority and dependencies, is rewritten only when a task changed
// status, and a burst of changes is one write.
func TestTasksMD(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{noService: true})
	svc, err := worker.New(h.pool, nil, worker.Config{TasksMD: worker.TasksMDConfig{Store: h.store, Path: "tasks.md"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	project := uuid.New()
	var agent uuid.UUID
	if err := h.pool.QueryRow(ctx, `INSERT INTO agents (project_id, name) VALUES ($1, 'coder') RETURNING id`, project).Scan(&agent); err != nil {
		t.Fatal(err)
	}
	head, err := agentsql.InsertTask(ctx, h.pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "Add a login page\nwith a form", AgentID: &agent, Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	next, err := agentsql.InsertTask(ctx, h.pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "Review <b>it</b> | *now*", DependsOn: []uuid.UUID{head.ID}})
	if err != nil {
		t.Fatal(err)
	}
	render := func(want int) string {
		t.Helper()
		n, err := svc.RenderTasksMD(ctx)
		if err != nil || n != want {
			t.Fatalf("RenderTasksMD wrote %d projects (%v), want %d", n, err, want)
		}
		c, _, err := h.store.Read(ctx, project.String(), "tasks.md")
		if err != nil {
			t.Fatal(err)
		}
		return string(c)
	}
	md := render(1)
	for _, want := range []string{
		"| waiting | 1 |", "| queued | 1 |", "| **all** | **2** |",
		"- `" + head.ID.String()[:8] + "` Add a login page — build, priority 1, agent coder\n",
		"- `" + next.ID.String()[:8] + "` Review &lt;b&gt;it&lt;/b&gt; \\| \\*now\\* — chat, priority 2, after `" + head.ID.String()[:8] + "`\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("tasks.md lacks %q:\n%s", want, md)
		}
	}
	if n, err := svc.RenderTasksMD(ctx); err != nil || n != 0 {
		t.Errorf("a render with no change wrote %d projects (%v)", n, err)
	}

	// A burst: 300 tasks cancelled one by one, then one render, one write.
	var ids []uuid.UUID
	for range 300 {
		task, err := agentsql.InsertTask(ctx, h.pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "burst"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	for _, id := range ids {
		if _, err := agentsql.ControlTask(ctx, h.pool, id, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if md = render(1); !strings.Contains(md, "| cancelled | 300 |") || !strings.Contains(md, "| **all** | **302** |") {
		t.Errorf("after the burst:\n%s", md[:min(len(md), 600)])
	}
}

// TestTasksMDWrittenByTheLeader: with a running service, a status change
// reaches tasks.md within a few seconds, without anyone asking.
func TestTasksMDWrittenByTheLeader(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{noService: true})
	svc, err := worker.New(h.pool, nil, worker.Config{TasksMD: worker.TasksMDConfig{Store: h.store, Path: "tasks.md"}, TasksMDInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(t.Context()) })
	project := uuid.New()
	task, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "tasks.md to list the cancelled task", 20*time.Second, func() bool {
		c, _, err := h.store.Read(t.Context(), project.String(), "tasks.md")
		return err == nil && strings.Contains(string(c), "| cancelled | 1 |")
	})
}

// TestTasksMDIdleRunsNoJob: a service whose projects do not change runs no
// tasks.md job after its first; a status change runs one that rewrites
// the project's tasks.md.
func TestTasksMDIdleRunsNoJob(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{noService: true})
	ctx := t.Context()
	const interval = 50 * time.Millisecond
	svc, err := worker.New(h.pool, nil, worker.Config{TasksMD: worker.TasksMDConfig{Store: h.store, Path: "tasks.md"}, TasksMDInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	jobs := func() (all, done int) {
		t.Helper()
		if err := h.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM river_job WHERE kind = $1`,
			worker.TasksMDKind).Scan(&all, &done); err != nil {
			t.Fatal(err)
		}
		return all, done
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.WithoutCancel(ctx)) })
	// The first render, at start, catches up on what changed while no
	// service listened.
	poll.Until(t, "the tasks.md job at start", 20*time.Second, func() bool {
		all, done := jobs()
		return all > 0 && all == done
	})
	before, _ := jobs()
	// Forty intervals with nothing changed: an idle window, not a wait for
	// something to happen.
	time.Sleep(40 * interval)
	if after, _ := jobs(); after != before {
		t.Errorf("%d tasks.md jobs in %s with nothing changed, want none", after-before, 40*interval)
	}

	project := uuid.New()
	task, err := agentsql.InsertTask(ctx, h.pool, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(ctx, h.pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "tasks.md to list the cancelled task", 20*time.Second, func() bool {
		c, _, err := h.store.Read(ctx, project.String(), "tasks.md")
		return err == nil && strings.Contains(string(c), "| cancelled | 1 |")
	})
}
