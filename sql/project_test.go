package sql_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// build inserts a build task of project in status (without a River job),
// finished at finished when not zero, with a change set in setStatus made
// of entries.
func build(t *testing.T, pool *pgxpool.Pool, project uuid.UUID, status agentsql.Status, finished time.Time, setStatus string, entries ...agentsql.ChangeEntry) uuid.UUID {
	t.Helper()
	var fin *time.Time
	if !finished.IsZero() {
		fin = &finished
	}
	var id uuid.UUID
	withoutPickup(t, pool, func(tx pgx.Tx) {
		// Inserted queued, held (running: the change set's writes are
		// fenced by the holder), then moved to status.
		fence := dbtest.HeldBuild(t, tx, project, "p")
		id = fence.TaskID
		if _, _, err := agentsql.OpenChangeSet(t.Context(), tx, fence, project); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if err := agentsql.PutChangeEntry(t.Context(), tx, fence, e); err != nil {
				t.Fatal(err)
			}
		}
		// The set first: a task that ends with its set still open discards it.
		if _, err := tx.Exec(t.Context(), `UPDATE change_sets SET status = $2 WHERE task_id = $1`, id, setStatus); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = $2, finished_at = $3, result = '{"iterations": 3, "summary": "done"}' WHERE id = $1`,
			id, status, fin); err != nil {
			t.Fatal(err)
		}
	})
	return id
}

func write(path, content, base string) agentsql.ChangeEntry {
	return agentsql.ChangeEntry{Path: path, Op: agentsql.ChangeWrite, Content: []byte(content), BaseETag: base}
}

func TestBuildChanges(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	t0 := time.Now().Add(-time.Hour)
	first := build(t, pool, project, agentsql.StatusSucceeded, t0, agentsql.ChangeSetApplied,
		write("a.txt", "one\n", ""), write("b.txt", "bee\n", ""), write("gone.txt", "x\n", ""))
	// A failed build in between: its writes never landed, so they are no
	// one's "before".
	build(t, pool, project, agentsql.StatusFailed, t0.Add(time.Minute), agentsql.ChangeSetApplied, write("a.txt", "never\n", "e1"))
	// Another project's build of the same path is not this project's history.
	build(t, pool, uuid.New(), agentsql.StatusSucceeded, t0.Add(2*time.Minute), agentsql.ChangeSetApplied, write("a.txt", "other\n", ""))
	second := build(t, pool, project, agentsql.StatusRunning, time.Time{}, agentsql.ChangeSetOpen,
		write("a.txt", "two\n", "e1"),
		agentsql.ChangeEntry{Path: "lib/b.txt", Op: agentsql.ChangeWrite, Content: []byte("bee\n"), FromPath: "b.txt"},
		agentsql.ChangeEntry{Path: "b.txt", Op: agentsql.ChangeDelete, BaseETag: "e2"},
		agentsql.ChangeEntry{Path: "gone.txt", Op: agentsql.ChangeDelete, BaseETag: "e3"},
		agentsql.ChangeEntry{Path: "new/c.txt", Op: agentsql.ChangeWrite, Content: []byte("c\n"), FromPath: "tmp.txt"},
		write("outside.txt", "v2\n", "e9"),
	)

	status, changes, err := agentsql.BuildChanges(t.Context(), pool, second)
	if err != nil || status != agentsql.ChangeSetOpen {
		t.Fatalf("BuildChanges = %q, %v", status, err)
	}
	type view struct {
		path, op, from, before string
		known                  bool
	}
	var got []view
	for _, c := range changes {
		got = append(got, view{c.Path, c.Op, c.FromPath, string(c.Before), c.BeforeKnown})
	}
	want := []view{
		{"a.txt", "write", "", "one\n", true},          // the first build's version, not the failed one's
		{"lib/b.txt", "write", "b.txt", "bee\n", true}, // a move; its source's delete is not listed
		{"gone.txt", "delete", "", "x\n", true},
		{"new/c.txt", "write", "", "", true}, // moved from a file this build created: a creation
		{"outside.txt", "write", "", "", false},
	}
	if len(got) != len(want) {
		t.Fatalf("changes = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	status, changes, err = agentsql.BuildChanges(t.Context(), pool, first)
	if err != nil || status != agentsql.ChangeSetApplied || len(changes) != 3 || changes[0].Before != nil || !changes[0].BeforeKnown {
		t.Errorf("first build: %q, %+v, %v", status, changes, err)
	}
	chat := insertTaskIn(t, pool, agentsql.StatusSucceeded)
	if status, changes, err := agentsql.BuildChanges(t.Context(), pool, chat); status != "" || changes != nil || err != nil {
		t.Errorf("a task without a change set: %q, %v, %v", status, changes, err)
	}
}

func TestListProjectTasks(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	empty, err := agentsql.ListProjectTasks(t.Context(), pool, project, agentsql.TaskQuery{Limit: 10})
	if err != nil || len(empty.Tasks) != 0 || empty.Head != (agentsql.ProjectCursor{}) {
		t.Fatalf("empty project: %+v, %v", empty, err)
	}
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, build(t, pool, project, agentsql.StatusSucceeded, time.Now(), agentsql.ChangeSetApplied))
	}
	build(t, pool, uuid.New(), agentsql.StatusSucceeded, time.Now(), agentsql.ChangeSetApplied) // another project
	ev, err := agentsql.InsertEvents(t.Context(), pool, ids[0], project, []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"m"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := agentsql.ListProjectTasks(t.Context(), pool, project, agentsql.TaskQuery{Limit: 2})
	if err != nil || len(page.Tasks) != 2 || page.Tasks[0].ID != ids[2] || page.Tasks[1].ID != ids[1] {
		t.Fatalf("first page = %+v, %v; want the two newest", page.Tasks, err)
	}
	if s := page.Tasks[0]; s.Iterations != 3 || s.Summary != "done" || s.Type != "build" || s.Status != agentsql.StatusSucceeded {
		t.Errorf("summary = %+v", s)
	}
	// The head waits for every older transaction in the cluster to end
	// (other tests' too): it reaches the event, never passes it.
	poll.Until(t, "the head to reach the event", 30*time.Second, func() bool {
		p, err := agentsql.ListProjectTasks(t.Context(), pool, project, agentsql.TaskQuery{Limit: 1})
		if err != nil || p.Head.ID != 0 && p.Head.ID != ev[0].ID {
			t.Fatalf("head = %+v, %v; want none yet or the cursor of event %d", p.Head, err, ev[0].ID)
		}
		return p.Head.ID == ev[0].ID && p.Head.Xid != 0
	})
	next, err := agentsql.ListProjectTasks(t.Context(), pool, project, agentsql.TaskQuery{Before: ids[1], Limit: 2})
	if err != nil || len(next.Tasks) != 1 || next.Tasks[0].ID != ids[0] {
		t.Errorf("page before %s = %+v, %v", ids[1], next.Tasks, err)
	}
	if n, err := agentsql.TaskIterations(t.Context(), pool, ids[0]); n != 3 || err != nil {
		t.Errorf("TaskIterations = %d, %v", n, err)
	}
}

func TestProjectUsageByDay(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	a := build(t, pool, project, agentsql.StatusSucceeded, time.Now(), agentsql.ChangeSetApplied)
	b := build(t, pool, project, agentsql.StatusSucceeded, time.Now(), agentsql.ChangeSetApplied)
	other := build(t, pool, uuid.New(), agentsql.StatusSucceeded, time.Now(), agentsql.ChangeSetApplied)
	for i, r := range []struct {
		task    uuid.UUID
		attempt int
		started string
		in, out int64
		cost    float64
	}{
		{a, 1, "now()", 100, 10, 0.5},
		{a, 2, "now()", 50, 5, 0.25},
		{b, 1, "now() - interval '1 day'", 7, 3, 0.125},
		{b, 2, "now() - interval '40 days'", 1000, 1000, 9}, // outside the window
		{other, 1, "now()", 999, 999, 9},
	} {
		if _, err := pool.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, tokens_out, cost, started_at)
			VALUES ($1, $2, $3, 'running', $4, $5, $6, `+r.started+`)`, r.task, r.attempt, uuid.NewString(), r.in, r.out, r.cost); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	days, err := agentsql.ProjectUsageByDay(t.Context(), pool, project, 30)
	if err != nil || len(days) != 2 {
		t.Fatalf("usage = %+v, %v; want two days", days, err)
	}
	today, yesterday := days[0], days[1]
	if today.Runs != 2 || today.Tasks != 1 || today.TokensIn != 150 || today.TokensOut != 15 || today.Cost != 0.75 {
		t.Errorf("today = %+v", today)
	}
	if yesterday.Runs != 1 || yesterday.TokensIn != 7 || yesterday.Cost != 0.125 || !yesterday.Day.Before(today.Day) {
		t.Errorf("yesterday = %+v", yesterday)
	}
}
