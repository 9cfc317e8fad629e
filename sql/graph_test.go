package sql_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// graph is a test's project of tasks on a real database.
type graph struct {
	t       *testing.T
	pool    *pgxpool.Pool
	project uuid.UUID
	jobs    int64
}

func newGraph(t *testing.T) *graph {
	t.Helper()
	return &graph{t: t, pool: dbtest.New(t), project: uuid.New()}
}

// chain inserts n tasks in one transaction, each depending on the one
// before.
func (g *graph) chain(n int) []uuid.UUID {
	g.t.Helper()
	var ids []uuid.UUID
	err := pgx.BeginFunc(g.t.Context(), g.pool, func(tx pgx.Tx) error {
		for i := range n {
			nt := agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "step"}
			if i > 0 {
				nt.DependsOn = []uuid.UUID{ids[i-1]}
			}
			task, err := agentsql.InsertTask(g.t.Context(), tx, nt)
			if err != nil {
				return err
			}
			ids = append(ids, task.ID)
		}
		return nil
	})
	if err != nil {
		g.t.Fatalf("insert a chain of %d: %v", n, err)
	}
	return ids
}

// state is a task's status and how many River jobs wait for it.
func (g *graph) state(id uuid.UUID) (agentsql.Status, int) {
	g.t.Helper()
	task, err := agentsql.GetTask(g.t.Context(), g.pool, id)
	if err != nil {
		g.t.Fatal(err)
	}
	var jobs int
	if err := g.pool.QueryRow(g.t.Context(), `SELECT count(*) FROM river_job
		WHERE kind = 'ai_task' AND args ->> 'task_id' = $1::text AND state = 'available'`, id).Scan(&jobs); err != nil {
		g.t.Fatal(err)
	}
	return task.Status, jobs
}

// want checks a task's status and its waiting jobs (jobs < 0: any number;
// a cancelled task's unclaimed job stays until it claims nothing).
func (g *graph) want(id uuid.UUID, status agentsql.Status, jobs int) {
	g.t.Helper()
	if got, n := g.state(id); got != status || (jobs >= 0 && n != jobs) {
		g.t.Errorf("task %s is %s with %d jobs, want %s with %d", id, got, n, status, jobs)
	}
}

// finish runs a task to the given end as a worker would: claim, then the
// final status.
func (g *graph) finish(id uuid.UUID, status agentsql.Status) {
	g.t.Helper()
	ctx := g.t.Context()
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		if err := g.claimIn(tx, id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE ai_tasks SET status = $2, finished_at = now() WHERE id = $1`, id, status)
		return err
	})
	if err != nil {
		g.t.Fatalf("run task %s to %s: %v", id, status, err)
	}
}

// claimIn claims a task in tx as a worker would, its River job worked and
// completed.
func (g *graph) claimIn(tx pgx.Tx, id uuid.UUID) error {
	ctx := g.t.Context()
	g.jobs++
	if _, err := tx.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE kind = 'ai_task' AND args ->> 'task_id' = $1::text AND state = 'available'`, id); err != nil {
		return err
	}
	c, err := agentsql.ClaimTask(ctx, tx, id, g.jobs, "test", time.Minute)
	if err != nil {
		return err
	}
	if !c.Claimed {
		return errors.New("not claimable")
	}
	return nil
}

func wantErrorContaining(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), code) {
		t.Fatalf("error %v, want one containing %s", err, code)
	}
}

// TestChainRunsInOrder: a chain of three inserted in one transaction has
// one job, for its head; each success queues (and enqueues) the next.
func TestChainRunsInOrder(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.chain(3)
	g.want(ids[0], agentsql.StatusQueued, 1)
	g.want(ids[1], agentsql.StatusWaiting, 0)
	g.want(ids[2], agentsql.StatusWaiting, 0)

	// The head's job finds it claimable; a dependent's claim finds nothing.
	g.finish(ids[0], agentsql.StatusSucceeded)
	g.want(ids[1], agentsql.StatusQueued, 1)
	g.want(ids[2], agentsql.StatusWaiting, 0)
	g.finish(ids[1], agentsql.StatusSucceeded)
	g.want(ids[2], agentsql.StatusQueued, 1)

	// Every move wrote an event for followers.
	var phases []string
	rows, _ := g.pool.Query(t.Context(), `SELECT payload ->> 'phase' FROM agent_events WHERE task_id = $1 AND type = 'agent_phase' ORDER BY seq`, ids[2])
	phases, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(phases) != 2 || phases[0] != "waiting" || phases[1] != "queued" {
		t.Errorf("the last task's phases: %v, %v; want waiting, queued", phases, err)
	}
}

// TestWaitingTaskIsNotClaimable: a job for a waiting task (one fetched
// before a dependency was added) claims nothing.
func TestWaitingTaskIsNotClaimable(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.chain(2)
	err := pgx.BeginFunc(t.Context(), g.pool, func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(t.Context(), tx, ids[1], 99, "test", time.Minute)
		if err == nil && c.Claimed {
			err = errors.New("a waiting task was claimed")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	g.want(ids[1], agentsql.StatusWaiting, 0)
}

// TestFailedDependencyBlocksDependents: a failure blocks the chain behind
// it, each task naming its own dependency; retrying the failed task puts
// them back to waiting, and its success releases them in order.
func TestFailedDependencyBlocksDependents(t *testing.T) {
	t.Parallel()
	for _, end := range []agentsql.Status{agentsql.StatusFailed, agentsql.StatusBlocked} {
		t.Run(string(end), func(t *testing.T) {
			t.Parallel()
			g := newGraph(t)
			ids := g.chain(3)
			g.finish(ids[0], end)
			for i, id := range ids[1:] {
				task, err := agentsql.GetTask(t.Context(), g.pool, id)
				if err != nil {
					t.Fatal(err)
				}
				var e struct{ Code, Dependency string }
				_ = json.Unmarshal(task.Error, &e)
				if task.Status != agentsql.StatusBlocked || e.Code != "dependency_failed" || e.Dependency != ids[i].String() {
					t.Errorf("dependent %d: %s, error %s; want blocked by dependency_failed of %s", i+1, task.Status, task.Error, ids[i])
				}
			}
			if _, err := agentsql.ControlTask(t.Context(), g.pool, ids[0], agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			g.want(ids[0], agentsql.StatusQueued, 1)
			g.want(ids[1], agentsql.StatusWaiting, 0)
			g.want(ids[2], agentsql.StatusWaiting, 0)
			g.finish(ids[0], agentsql.StatusSucceeded)
			g.want(ids[1], agentsql.StatusQueued, 1)
			g.want(ids[2], agentsql.StatusWaiting, 0)
		})
	}
}

// TestCancelledDependencyBlocks: a cancel blocks dependents as a failure
// does; retrying a blocked dependent while its dependency is still
// cancelled makes it wait, not run.
func TestCancelledDependencyBlocks(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.chain(2)
	if _, err := agentsql.ControlTask(t.Context(), g.pool, ids[0], agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(ids[1], agentsql.StatusBlocked, 0)
	if _, err := agentsql.ControlTask(t.Context(), g.pool, ids[1], agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(ids[1], agentsql.StatusWaiting, 0)
}

// TestDependencyRulesRefused: edges that could never be satisfied, or that
// arrive too late, are refused with INVALID_TASK_DEPENDENCY.
func TestDependencyRulesRefused(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	insert := func(db agentsql.DBTX, project uuid.UUID, deps ...uuid.UUID) (uuid.UUID, error) {
		task, err := agentsql.InsertTask(ctx, db, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "x", DependsOn: deps})
		return task.ID, err
	}
	a, err := insert(g.pool, g.project)
	if err != nil {
		t.Fatal(err)
	}
	edge := func(db agentsql.DBTX, task, dep uuid.UUID) error {
		_, err := db.Exec(ctx, `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2)`, task, dep)
		return err
	}
	t.Run("Itself", func(t *testing.T) {
		wantErrorContaining(t, edge(g.pool, a, a), "INVALID_TASK_DEPENDENCY")
	})
	t.Run("AnotherProject", func(t *testing.T) {
		other, err := insert(g.pool, uuid.New())
		if err != nil {
			t.Fatal(err)
		}
		_, err = insert(g.pool, g.project, other)
		wantErrorContaining(t, err, "INVALID_TASK_DEPENDENCY")
	})
	t.Run("Missing", func(t *testing.T) {
		_, err := insert(g.pool, g.project, uuid.New())
		wantErrorContaining(t, err, "INVALID_TASK_DEPENDENCY")
	})
	t.Run("CycleInOneTransaction", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
			x, err := insert(tx, g.project)
			if err != nil {
				return err
			}
			y, err := insert(tx, g.project, x)
			if err != nil {
				return err
			}
			z, err := insert(tx, g.project, y)
			if err != nil {
				return err
			}
			return edge(tx, x, z)
		})
		wantErrorContaining(t, err, "INVALID_TASK_DEPENDENCY")
	})
	t.Run("StartedTask", func(t *testing.T) {
		b, err := insert(g.pool, g.project)
		if err != nil {
			t.Fatal(err)
		}
		g.finish(b, agentsql.StatusSucceeded)
		wantErrorContaining(t, edge(g.pool, b, a), "INVALID_TASK_DEPENDENCY")
	})
}

// TestLateDependencyMakesATaskWait: an edge added after the task's insert,
// before it started, takes its job away.
func TestLateDependencyMakesATaskWait(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	var ids []uuid.UUID
	for range 2 {
		task, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	g.want(ids[1], agentsql.StatusQueued, 1)
	if _, err := g.pool.Exec(ctx, `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2)`, ids[1], ids[0]); err != nil {
		t.Fatal(err)
	}
	g.want(ids[1], agentsql.StatusWaiting, 0)
}

// TestDeleteTaskWithDependents: a task others depend on cannot be deleted
// alone, only with them.
func TestDeleteTaskWithDependents(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.chain(2)
	_, err := g.pool.Exec(t.Context(), `DELETE FROM ai_tasks WHERE id = $1`, ids[0])
	wantErrorContaining(t, err, "TASK_HAS_DEPENDENTS")
	if _, err := g.pool.Exec(t.Context(), `DELETE FROM ai_tasks WHERE id = ANY ($1)`, ids); err != nil {
		t.Fatalf("delete a task with its dependents: %v", err)
	}
	var edges int
	if err := g.pool.QueryRow(t.Context(), `SELECT count(*) FROM task_dependencies`).Scan(&edges); err != nil || edges != 0 {
		t.Fatalf("edges left: %d, %v", edges, err)
	}
}

// TestPriorityIsTheJobs: a task's priority is its River job's, by every
// way a job is made (insert, a dependency's success).
func TestPriorityIsTheJobs(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	head, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x", Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	next, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x", Priority: 1, DependsOn: []uuid.UUID{head.ID}})
	if err != nil {
		t.Fatal(err)
	}
	priority := func(id uuid.UUID) int {
		t.Helper()
		var p int
		if err := g.pool.QueryRow(ctx, `SELECT priority FROM river_job WHERE args ->> 'task_id' = $1::text`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := priority(head.ID); p != 4 {
		t.Errorf("the priority-4 task's job has priority %d", p)
	}
	g.finish(head.ID, agentsql.StatusSucceeded)
	if p := priority(next.ID); p != 1 {
		t.Errorf("the priority-1 dependent's job has priority %d", p)
	}
	_, err = agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x", Priority: 5})
	if err == nil {
		t.Error("priority 5 was accepted")
	}
}

// TestAssigneeRules: a task runs as an enabled agent of its own project.
func TestAssigneeRules(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	agent := func(project uuid.UUID, status string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		if err := g.pool.QueryRow(ctx, `INSERT INTO agents (project_id, name, status) VALUES ($1, $2, $3) RETURNING id`,
			project, "agent-"+uuid.NewString()[:8], status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	insert := func(agentID uuid.UUID) error {
		_, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x", AgentID: &agentID})
		return err
	}
	if err := insert(agent(g.project, "enabled")); err != nil {
		t.Fatalf("a task of an enabled agent of its project: %v", err)
	}
	wantErrorContaining(t, insert(agent(g.project, "disabled")), "INVALID_ASSIGNEE")
	wantErrorContaining(t, insert(agent(uuid.New(), "enabled")), "INVALID_ASSIGNEE")
	wantErrorContaining(t, insert(uuid.New()), "INVALID_ASSIGNEE")

	// An agent with unfinished tasks stays.
	busy := agent(g.project, "enabled")
	if err := insert(busy); err != nil {
		t.Fatal(err)
	}
	_, err := g.pool.Exec(ctx, `DELETE FROM agents WHERE id = $1`, busy)
	wantErrorContaining(t, err, "AGENT_HAS_TASKS")
}

// TestCancelParentCancelsChildren: cancelling a task cancels its unfinished
// children, a waiting one included, and leaves finished ones alone.
func TestCancelParentCancelsChildren(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	parent, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "plan", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	child := func(deps ...uuid.UUID) uuid.UUID {
		t.Helper()
		task, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "x", ParentTaskID: &parent.ID, DependsOn: deps})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID
	}
	done, queued := child(), child()
	waiting := child(queued)
	g.finish(done, agentsql.StatusSucceeded)
	if _, err := agentsql.ControlTask(ctx, g.pool, parent.ID, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(done, agentsql.StatusSucceeded, 0)
	g.want(queued, agentsql.StatusCancelled, -1)
	g.want(waiting, agentsql.StatusCancelled, 0)

	_, err = agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "x", ParentTaskID: &parent.ID})
	wantErrorContaining(t, err, "INVALID_PARENT_TASK")
}

// TestExpandPlanOnceUnderItsFence: a plan's tasks are created under the
// holder's fence, in the finish's transaction: a stale holder creates
// nothing (its whole transaction fails), and a second expansion of the same
// plan creates no second set.
func TestExpandPlanOnceUnderItsFence(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	plan, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "plan", Prompt: "plan", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"})
	if err != nil {
		t.Fatal(err)
	}
	var fence agentsql.Fence
	err = pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(ctx, tx, plan.ID, 1, "test", time.Minute)
		fence = agentsql.Fence{TaskID: plan.ID, Epoch: c.Task.Fence}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tasks := []agentsql.PlannedTask{
		{Key: "a", Title: "A", Prompt: "do a", Type: "build", Priority: 1, DependsOn: []string{}},
		{Key: "b", Title: "B", Prompt: "do b", Type: "chat", Priority: 2, DependsOn: []string{"a"}},
	}
	// The span of the plan's attempt: the children's attempts go under it.
	const planSpan = "00f067aa0ba902b7"
	expand := func(f agentsql.Fence) error {
		var p agentsql.Pipeline
		if err := agentsql.QueueExpandPlan(&p, f, tasks, planSpan); err != nil {
			return err
		}
		return p.Run(ctx, g.pool)
	}
	children := func() int {
		var n int
		if err := g.pool.QueryRow(ctx, `SELECT count(*) FROM ai_tasks WHERE parent_task_id = $1`, plan.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := expand(agentsql.Fence{TaskID: plan.ID, Epoch: fence.Epoch - 1}); !errors.Is(err, agentsql.ErrFenced) || children() != 0 {
		t.Fatalf("a stale holder's expansion: %v, %d children; want ErrFenced and none", err, children())
	}
	for range 2 {
		if err := expand(fence); err != nil {
			t.Fatal(err)
		}
	}
	if n := children(); n != 2 {
		t.Fatalf("two expansions made %d children, want one set of 2", n)
	}
	var joined int
	if err := g.pool.QueryRow(ctx, `SELECT count(*) FROM ai_tasks c JOIN ai_tasks p ON p.id = c.parent_task_id
		WHERE c.parent_task_id = $1 AND c.trace_parent = $2 AND c.trace_id = p.trace_id`, plan.ID, planSpan).Scan(&joined); err != nil {
		t.Fatal(err)
	}
	if joined != 2 {
		t.Errorf("%d of the 2 children carry the plan's trace id and its attempt's span as their trace parent", joined)
	}
}

// TestReviewDoesNotReleaseDependents: a dependency in review has not
// succeeded: its dependent keeps waiting through the review, a reject with
// feedback and an approve, and is queued once the approved task succeeds.
func TestReviewDoesNotReleaseDependents(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.chain(2)
	g.finish(ids[0], agentsql.StatusReview)
	g.want(ids[0], agentsql.StatusReview, -1)
	g.want(ids[1], agentsql.StatusWaiting, 0)
	for _, step := range []struct {
		action agentsql.Action
		answer string
		then   agentsql.Status
	}{{agentsql.ActionReject, "once more", agentsql.StatusReview}, {agentsql.ActionApprove, "", agentsql.StatusSucceeded}} {
		if _, err := agentsql.ControlTask(t.Context(), g.pool, ids[0], step.action, agentsql.ControlOpts{Actor: "tester", Answer: step.answer}); err != nil {
			t.Fatalf("%s: %v", step.action, err)
		}
		g.want(ids[0], agentsql.StatusQueued, -1)
		g.want(ids[1], agentsql.StatusWaiting, 0)
		g.finish(ids[0], step.then)
	}
	g.want(ids[1], agentsql.StatusQueued, 1)
}
