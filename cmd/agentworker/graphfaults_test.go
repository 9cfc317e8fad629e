package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

// TestGraphUnderFaults: 500 graphs of four chat tasks, diamonds (A; B and
// C after A; D after both) and chains (A→B→C→D), and 20 plans that expand
// into two tasks, run on four serve processes while one is killed with
// SIGKILL and Postgres is crashed and restarted. Every task succeeds, once;
// none is left waiting; each plan has one set of children; and no process
// needed the reconciler's backstop for a waiting task.
func TestGraphUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes over 2,000 tasks")
	}
	t.Parallel()
	const graphs, plans, replicas = 500, 20, 4
	plan, err := json.Marshal(handlers.Plan{Summary: "Two tasks.", Steps: []handlers.PlanStep{}, Tasks: []handlers.PlanTask{
		{Key: "t1", Title: "First", Prompt: "first", Type: "chat", Priority: 2, DependsOn: []string{}},
		{Key: "t2", Title: "Second", Prompt: "second", Type: "chat", Priority: 2, DependsOn: []string{"t1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	pg := startPrivatePG(t)
	e := &procEnv{dbURL: pg.cluster.URL("postgres"), s3: s3test.Config(t),
		env: []string{"WORKER_CONCURRENCY=8"}}
	e.llm = llmtest.NewWith(t, scripted.Func(func(req *scripted.Request) scripted.Reply {
		if strings.Contains(string(req.Body), `"json_schema"`) {
			return scripted.Reply{Content: string(plan)}
		}
		return scripted.Reply{Delay: 20 * time.Millisecond, Content: "Done."}
	}))
	e.pool = testPool(t, e.dbURL, true)
	var procs []*proc
	for range replicas {
		procs = append(procs, e.start(t, 2*time.Second))
	}

	started := time.Now()
	var planIDs []uuid.UUID
	for g := range graphs {
		project := uuid.New()
		err := pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error {
			add := func(deps ...uuid.UUID) (uuid.UUID, error) {
				task, err := agentsql.InsertTask(t.Context(), tx, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "step", DependsOn: deps})
				return task.ID, err
			}
			a, err := add()
			if err != nil {
				return err
			}
			if g%2 == 0 { // a diamond
				b, err := add(a)
				if err != nil {
					return err
				}
				c, err := add(a)
				if err != nil {
					return err
				}
				_, err = add(b, c)
				return err
			}
			prev := a
			for range 3 {
				if prev, err = add(prev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("insert graph %d: %v", g, err)
		}
		if g%(graphs/plans) == 0 {
			task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: project, Type: "plan", Prompt: "plan two steps",
				Input: json.RawMessage(`{"expand": true}`)})
			if err != nil {
				t.Fatal(err)
			}
			planIDs = append(planIDs, task.ID)
		}
	}
	total := graphs*4 + plans*3
	succeeded := func() int {
		var n int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE status = 'succeeded'`).Scan(&n); err != nil {
			return 0 // the database may be coming back
		}
		return n
	}
	poll.Until(t, "a quarter of the tasks to succeed", 5*time.Minute, func() bool { return succeeded() >= total/4 })
	if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[0].exited
	procs[0] = e.start(t, 2*time.Second)
	poll.Until(t, "half of the tasks to succeed", 5*time.Minute, func() bool { return succeeded() >= total/2 })
	pg.crash(t)
	pg.restart(t)

	var open int
	poll.Until(t, "every task to end", 5*time.Minute, func() bool {
		err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE status NOT IN ('succeeded', 'failed', 'blocked', 'cancelled')`).Scan(&open)
		return err == nil && open == 0
	})
	wall := time.Since(started)

	var tasks, ok, onceSucceeded int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'),
			count(*) FILTER (WHERE (SELECT count(*) FROM task_runs r WHERE r.task_id = t.id AND r.status = 'succeeded') = 1)
		FROM ai_tasks t`).Scan(&tasks, &ok, &onceSucceeded); err != nil {
		t.Fatal(err)
	}
	if tasks != total || ok != total || onceSucceeded != total {
		t.Errorf("%d tasks (want %d), %d succeeded, %d with exactly one succeeded run; want every one", tasks, total, ok, onceSucceeded)
	}
	for _, id := range planIDs {
		var children int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE parent_task_id = $1`, id).Scan(&children); err != nil || children != 2 {
			t.Errorf("plan %s has %d children (%v), want one set of 2", id, children, err)
		}
	}
	for i, p := range procs {
		if strings.Contains(p.out.String(), "released waiting tasks") {
			t.Errorf("process %d needed the reconciler to release waiting tasks:\n%s", i, p.out.String())
		}
	}
	var p50, p99 float64
	if err := e.pool.QueryRow(t.Context(), `WITH ready AS (
			SELECT d.task_id, max(u.finished_at) AS at FROM task_dependencies d JOIN ai_tasks u ON u.id = d.depends_on_task_id GROUP BY d.task_id)
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
		FROM (SELECT extract(epoch FROM t.started_at - r.at) * 1000 AS ms FROM ready r JOIN ai_tasks t ON t.id = r.task_id) x`).Scan(&p50, &p99); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tasks (%d graphs, %d plans) on %d processes, one killed, Postgres crashed once: ended in %s (%.0f tasks/s); "+
		"dependency done → dependent started p50 %.1f ms, p99 %.1f ms", tasks, graphs, plans, replicas, wall.Round(100*time.Millisecond),
		float64(tasks)/wall.Seconds(), p50, p99)
}
