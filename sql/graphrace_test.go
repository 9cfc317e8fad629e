package sql_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/poll"
)

// session is one connection holding an open transaction, whose statements
// a test runs one at a time, each until it returned or waits for a lock.
type session struct {
	g   *graph
	tx  pgx.Tx
	pid uint32
}

func (g *graph) begin(iso pgx.TxIsoLevel) *session {
	g.t.Helper()
	ctx := g.t.Context()
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(conn.Release)
	s := &session{g: g, pid: conn.Conn().PgConn().PID()}
	if s.tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso}); err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = s.tx.Rollback(context.WithoutCancel(ctx)) })
	return s
}

// run starts a statement and returns once it returned or its backend waits
// for a lock; the channel gives its error when it returns.
func (s *session) run(sql string, args ...any) <-chan error {
	s.g.t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.tx.Exec(s.g.t.Context(), sql, args...)
		done <- err
	}()
	poll.Until(s.g.t, "the statement to return or wait for a lock", 10*time.Second, func() bool {
		if len(done) > 0 {
			return true
		}
		var waiting bool
		err := s.g.pool.QueryRow(s.g.t.Context(), `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, s.pid).Scan(&waiting)
		return err == nil && waiting
	})
	return done
}

// exec runs a statement that must not wait, and returns its error.
func (s *session) exec(sql string, args ...any) error {
	s.g.t.Helper()
	return returned(s.g.t, s.run(sql, args...), sql)
}

// returned waits a bounded time for a statement started by run.
func returned(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("%s still waits after 15 s", what)
		return nil
	}
}

// insert inserts n tasks of the graph's project.
func (g *graph) insert(n int) []uuid.UUID {
	g.t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		task, err := agentsql.InsertTask(g.t.Context(), g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "task"})
		if err != nil {
			g.t.Fatal(err)
		}
		ids[i] = task.ID
	}
	return ids
}

// start claims a task as a worker would and commits: it is running.
func (g *graph) start(id uuid.UUID) {
	g.t.Helper()
	err := pgx.BeginFunc(g.t.Context(), g.pool, func(tx pgx.Tx) error { return g.claimIn(tx, id) })
	if err != nil {
		g.t.Fatalf("start task %s: %v", id, err)
	}
}

const setStatus = `UPDATE ai_tasks SET status = $2, finished_at = now() WHERE id = $1`

// TestFanInReleasedWhateverTheCommitOrder: D depends on X and Y, which
// succeed in overlapping transactions. Each transaction's release sees the
// other dependency still running when it looks, yet the second to commit
// must queue D, with its job.
func TestFanInReleasedWhateverTheCommitOrder(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.insert(3)
	x, y, d := ids[0], ids[1], ids[2]
	if _, err := g.pool.Exec(t.Context(), `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2), ($1, $3)`, d, x, y); err != nil {
		t.Fatal(err)
	}
	g.start(x)
	g.start(y)
	sx, sy := g.begin(pgx.ReadCommitted), g.begin(pgx.ReadCommitted)
	if err := sx.exec(setStatus, x, agentsql.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	second := sy.run(setStatus, y, agentsql.StatusSucceeded)
	if err := sx.tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := returned(t, second, "Y's success"); err != nil {
		t.Fatal(err)
	}
	if err := sy.tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.want(d, agentsql.StatusQueued, 1)
}

// TestConcurrentEdgesCannotCloseAFourTaskCycle: A→B, B→C in one
// transaction and C→D, D→A in another close A→B→C→D→A. The graph's
// project lock makes the second wait for the first and refuse the edge
// that closes the cycle, whatever order their statements come in (without
// it they would deadlock, or both commit at snapshot isolation).
func TestConcurrentEdgesCannotCloseAFourTaskCycle(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ids := g.insert(4)
	a, b, c, d := ids[0], ids[1], ids[2], ids[3]
	const edge = `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2)`
	s1, s2 := g.begin(pgx.ReadCommitted), g.begin(pgx.ReadCommitted)
	if err := s1.exec(edge, a, b); err != nil {
		t.Fatal(err)
	}
	cd := s2.run(edge, c, d)
	bc := s1.run(edge, b, c)
	if err := returned(t, bc, "B→C (it must not wait for the other transaction)"); err != nil {
		t.Fatalf("B→C: %v", err)
	}
	if err := s1.tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := returned(t, cd, "C→D"); err != nil {
		t.Fatalf("C→D: %v", err)
	}
	wantErrorContaining(t, s2.exec(edge, d, a), "closes a cycle")
}

// TestEdgesRefusedAtSnapshotIsolation: a transaction whose snapshot was
// taken before another's edges committed cannot see the cycle it closes,
// so edges are refused at REPEATABLE READ and SERIALIZABLE, with an error
// that says so; at READ COMMITTED they are added.
func TestEdgesRefusedAtSnapshotIsolation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		iso  pgx.TxIsoLevel
		want string
	}{
		{pgx.RepeatableRead, "READ COMMITTED"},
		{pgx.Serializable, "READ COMMITTED"},
		{pgx.ReadCommitted, ""},
	} {
		t.Run(string(tt.iso), func(t *testing.T) {
			t.Parallel()
			g := newGraph(t)
			ids := g.insert(2)
			s := g.begin(tt.iso)
			err := s.exec(`INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2)`, ids[0], ids[1])
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErrorContaining(t, err, "INVALID_TASK_DEPENDENCY")
			wantErrorContaining(t, err, tt.want)
		})
	}
}

// TestCancelParentCancelsEveryUnfinishedChild: cancelling a parent
// cancels each child in any status a cancel may leave, review included, so
// no child of a cancelled parent is approved and applied afterwards.
func TestCancelParentCancelsEveryUnfinishedChild(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	parent := g.insert(1)[0]
	child := func() uuid.UUID {
		task, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "build", Prompt: "child", ParentTaskID: &parent})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID
	}
	inReview, running, queued, done := child(), child(), child(), child()
	g.start(inReview)
	if _, err := g.pool.Exec(ctx, `UPDATE ai_tasks SET status = 'review' WHERE id = $1`, inReview); err != nil {
		t.Fatal(err)
	}
	g.start(running)
	g.finish(done, agentsql.StatusSucceeded)
	if _, err := agentsql.ControlTask(ctx, g.pool, parent, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(inReview, agentsql.StatusCancelled, 0)
	g.want(running, agentsql.StatusCancelled, -1)
	g.want(queued, agentsql.StatusCancelled, -1)
	g.want(done, agentsql.StatusSucceeded, 0)
}

// TestRetriedDependencyKeepsDependentBlockedWhileAnotherFailed: D depends
// on X and Y, both failed; retrying X leaves D blocked, by Y now, and only
// retrying Y too lets D wait again.
func TestRetriedDependencyKeepsDependentBlockedWhileAnotherFailed(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	ids := g.insert(3)
	x, y, d := ids[0], ids[1], ids[2]
	if _, err := g.pool.Exec(ctx, `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2), ($1, $3)`, d, x, y); err != nil {
		t.Fatal(err)
	}
	g.finish(x, agentsql.StatusFailed)
	g.finish(y, agentsql.StatusFailed)
	g.want(d, agentsql.StatusBlocked, 0)
	blockedBy := func() string {
		task, err := agentsql.GetTask(ctx, g.pool, d)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Dependency string }
		_ = json.Unmarshal(task.Error, &e)
		return e.Dependency
	}
	first := blockedBy()
	retried, other := x, y
	if first == y.String() {
		retried, other = y, x
	}
	if _, err := agentsql.ControlTask(ctx, g.pool, retried, agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(d, agentsql.StatusBlocked, 0)
	if got := blockedBy(); got != other.String() {
		t.Errorf("D is blocked by %s, want the dependency still failed, %s", got, other)
	}
	if _, err := agentsql.ControlTask(ctx, g.pool, other, agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(d, agentsql.StatusWaiting, 0)
}

// TestTaskBoardCursorNeverSkipsALateCommit: a status change whose
// transaction began before the renderer read, and commits after it, is
// read by the renderer's next call.
func TestTaskBoardCursorNeverSkipsALateCommit(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	late, early := uuid.New(), uuid.New()
	insertPhase := func(db agentsql.DBTX, project uuid.UUID) {
		t.Helper()
		task, err := agentsql.InsertTask(ctx, db, agentsql.NewTask{ProjectID: project, Type: "chat", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload) VALUES ($1, $2, 'agent_phase', '{"phase": "queued"}')`,
			task.ID, project); err != nil {
			t.Fatal(err)
		}
	}
	changed := func() []uuid.UUID {
		t.Helper()
		var projects []uuid.UUID
		err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
			var err error
			projects, _, err = agentsql.ChangedTaskBoards(ctx, tx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return projects
	}
	changed() // the cursor past what the inserts above wrote
	open := g.begin(pgx.ReadCommitted)
	insertPhase(open.tx, late)
	insertPhase(g.pool, early)
	if got := changed(); !slices.Contains(got, early) {
		t.Fatalf("changed = %v, want the committed project %s", got, early)
	}
	if err := open.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := changed(); !slices.Contains(got, late) {
		t.Errorf("changed after the late commit = %v, want its project %s", got, late)
	}
}

// TestReleaseStrandedQueuesWhatTheTriggersMissed: a waiting task whose
// dependencies all succeeded without releasing it (their success written
// with the triggers off) is queued, with its job, by the reconciler's
// backstop, once it has waited past the minimum age; a task still waiting
// for a running dependency is left alone.
func TestReleaseStrandedQueuesWhatTheTriggersMissed(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	ids := g.insert(4)
	x, d, y, e := ids[0], ids[1], ids[2], ids[3]
	if _, err := g.pool.Exec(ctx, `INSERT INTO task_dependencies (task_id, depends_on_task_id) VALUES ($1, $2), ($3, $4)`, d, x, e, y); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica;
			UPDATE ai_tasks SET status = 'succeeded', finished_at = now() WHERE id = '`+x.String()+`'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	g.want(d, agentsql.StatusWaiting, 0)
	if got, err := agentsql.ReleaseStranded(ctx, g.pool, time.Hour, 100); err != nil || len(got) != 0 {
		t.Fatalf("released %v (%v) before the minimum age", got, err)
	}
	got, err := agentsql.ReleaseStranded(ctx, g.pool, 0, 100)
	if err != nil || len(got) != 1 || got[0] != d {
		t.Fatalf("released %v (%v), want only %s", got, err, d)
	}
	g.want(d, agentsql.StatusQueued, 1)
	g.want(e, agentsql.StatusWaiting, 0)
}

// TestRetryWithChildren: retrying a cancelled parent with its children
// retries the children its cancel left cancelled, and theirs; a child that
// had succeeded stays so, and without Children none is retried.
func TestRetryWithChildren(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	parent := g.insert(1)[0]
	child := func(parent uuid.UUID) uuid.UUID {
		task, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "chat", Prompt: "child", ParentTaskID: &parent})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID
	}
	a, done := child(parent), child(parent)
	grandchild := child(a)
	g.finish(done, agentsql.StatusSucceeded)
	cancel := func() {
		t.Helper()
		if _, err := agentsql.ControlTask(ctx, g.pool, parent, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	g.want(grandchild, agentsql.StatusCancelled, -1)
	if _, err := agentsql.ControlTask(ctx, g.pool, parent, agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(a, agentsql.StatusCancelled, -1)
	cancel()
	res, err := agentsql.ControlTask(ctx, g.pool, parent, agentsql.ActionRetry, agentsql.ControlOpts{Actor: "test", Children: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 1 || res.Children[0].TaskID != a || len(res.Children[0].Children) != 1 || res.Children[0].Children[0].TaskID != grandchild {
		t.Errorf("retry results = %+v, want the child and its child", res)
	}
	for _, id := range []uuid.UUID{parent, a, grandchild} {
		if status, _ := g.state(id); status != agentsql.StatusQueued {
			t.Errorf("task %s is %s after the retry with children, want queued", id, status)
		}
	}
	g.want(done, agentsql.StatusSucceeded, 0)
	if _, err := agentsql.ControlTask(ctx, g.pool, parent, agentsql.ActionPause, agentsql.ControlOpts{Children: true}); !errors.Is(err, agentsql.ErrInvalidAction) {
		t.Errorf("pause with children: %v, want ErrInvalidAction", err)
	}
}

// TestRejectPlanBuildWithFeedbackRefused: a build that follows a plan's
// steps replays them and has no conversation to revise: a reject with
// feedback is refused with a message that says what to do instead, and
// leaves it in review; a reject without feedback ends it.
func TestRejectPlanBuildWithFeedbackRefused(t *testing.T) {
	t.Parallel()
	g := newGraph(t)
	ctx := t.Context()
	task, err := agentsql.InsertTask(ctx, g.pool, agentsql.NewTask{ProjectID: g.project, Type: "build", Prompt: "build the plan",
		Input: json.RawMessage(`{"plan_task_id": "` + uuid.NewString() + `", "review": true}`)})
	if err != nil {
		t.Fatal(err)
	}
	g.start(task.ID)
	if _, err := g.pool.Exec(ctx, `UPDATE ai_tasks SET status = 'review' WHERE id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	_, err = agentsql.ControlTask(ctx, g.pool, task.ID, agentsql.ActionReject, agentsql.ControlOpts{Actor: "test", Answer: "use tabs"})
	if !errors.Is(err, agentsql.ErrIllegalTransition) || !strings.Contains(err.Error(), "reject it without feedback") {
		t.Fatalf("reject with feedback: %v, want refused saying to reject without feedback", err)
	}
	g.want(task.ID, agentsql.StatusReview, 0)
	if _, err := agentsql.ControlTask(ctx, g.pool, task.ID, agentsql.ActionReject, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	g.want(task.ID, agentsql.StatusCancelled, 0)
}
