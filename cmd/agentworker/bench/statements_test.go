package bench

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// statementLog records the statements a pool sends while on.
type statementLog struct {
	mu        sync.Mutex
	on        bool
	sent      []statement
	pipelines int
}

// statement is one statement sent on conn; pipeline numbers those sent
// together in one pipeline (pgx.Batch: one round trip), 0 for one sent alone.
type statement struct {
	sql      string
	pipeline int
	conn     *pgx.Conn
}

func (s statement) String() string {
	if s.pipeline == 0 {
		return s.sql
	}
	return fmt.Sprintf("[pipeline %d] %s", s.pipeline, s.sql)
}

var spaces = regexp.MustCompile(`\s+`)

func (l *statementLog) add(conn *pgx.Conn, pipeline int, sql string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.sent = append(l.sent, statement{spaces.ReplaceAllString(strings.TrimSpace(sql), " "), pipeline, conn})
	}
}

func (l *statementLog) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(conn, 0, d.SQL)
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type pipelineKey struct{}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pipelines++
	return context.WithValue(ctx, pipelineKey{}, l.pipelines)
}

func (l *statementLog) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	n, _ := ctx.Value(pipelineKey{}).(int)
	l.add(conn, n, d.SQL)
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// roundTrips counts statements, one per pipeline for those sent in one.
func roundTrips(sent []statement) int {
	n := 0
	seen := map[int]bool{}
	for _, s := range sent {
		if s.pipeline == 0 || !seen[s.pipeline] {
			n++
			seen[s.pipeline] = true
		}
	}
	return n
}

// ours drops River's own statements (they are named "-- name: …"), the
// announcer's NOTIFY (one per process every few ms, shared by every task)
// and the leader's periodic maintenance, which a task does not cause, and
// the begin and commit of a transaction that held only those. Transactions
// are told apart by connection: another connection's statements may come
// between a River transaction's begin and commit.
func (l *statementLog) ours() []statement {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []statement
	dropped := map[int]bool{}
	type openTx struct {
		begin int // index in out
		ours  bool
	}
	open := map[*pgx.Conn]*openTx{}
	for _, s := range l.sent {
		switch {
		case strings.HasPrefix(s.sql, "-- name:"), strings.HasPrefix(s.sql, "SELECT pg_notify("),
			strings.Contains(s.sql, "agentworker_flag_idle"), strings.Contains(s.sql, "agentworker_take_over_lapsed"),
			strings.Contains(s.sql, "NOT EXISTS ( SELECT 1 FROM river_job j"):
			continue
		case s.sql == "begin":
			open[s.conn] = &openTx{begin: len(out)}
		case s.sql == "commit" || s.sql == "rollback":
			tx := open[s.conn]
			delete(open, s.conn)
			if tx != nil && !tx.ours {
				dropped[tx.begin] = true
				continue
			}
		default:
			if tx := open[s.conn]; tx != nil {
				tx.ours = true
			}
		}
		out = append(out, s)
	}
	// A transaction still open at the end, with nothing of ours in it, is
	// River's completing the job (its commit may come after the log is read).
	for _, tx := range open {
		if !tx.ours {
			dropped[tx.begin] = true
		}
	}
	kept := out[:0]
	for i, s := range out {
		if !dropped[i] {
			kept = append(kept, s)
		}
	}
	return kept
}

// TestStatementsPerBuildTask holds the database work of one two-call build
// (write a file, finish) to its budget: every statement is a round trip and
// most are a commit, and at hundreds of tasks a second they are what the
// worker and Postgres spend their CPU on. A change that adds statements to
// a task's path fails here and has to say why. Statements sent together in
// one pipeline are one round trip.
func TestStatementsPerBuildTask(t *testing.T) {
	t.Parallel()
	// claim 1 (the claim writes its events, reads the pause request and
	// opens the change set), events 1, stage the write 1, checkpoint 2
	// (the iteration's events with the second iteration's start unless a
	// pause was requested, and the checkpoint: one round trip), mark
	// applying 1, finish 3 (the events since, change set, task: one round
	// trip).
	const budget, tripBudget = 9, 6
	ctx := t.Context()
	log := &statementLog{}
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := &database{pool: pool, drop: func() {}}
	p, err := startPipeline(ctx, withDefaults(Options{Store: store, Concurrency: 10, toolStartDelay: 10 * time.Second}), db, fixedDelayModel(50*time.Millisecond), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(context.Background()) })

	// A first task warms River and the pool; the second is counted.
	for i, prompt := range []string{"warm-up", "counted"} {
		log.mu.Lock()
		log.on = i == 1
		log.mu.Unlock()
		runTask(t, db, p, prompt)
	}
	time.Sleep(200 * time.Millisecond) // the handler returned; its job's completion is River's
	got := log.ours()
	// The insert is the app's, not the task's.
	if len(got) > 0 && strings.HasPrefix(got[0].sql, "INSERT INTO ai_tasks") {
		got = got[1:]
	}
	list := make([]string, len(got))
	for i, s := range got {
		list[i] = s.String()
	}
	if trips := roundTrips(got); len(got) > budget || trips > tripBudget {
		t.Errorf("one build task sent %d statements in %d round trips, budget %d in %d:\n%s",
			len(got), trips, budget, tripBudget, strings.Join(list, "\n"))
	} else {
		t.Logf("one build task sent %d statements in %d round trips (budget %d in %d):\n%s",
			len(got), trips, budget, tripBudget, strings.Join(list, "\n"))
	}
}

// runTask inserts a build task and waits until its handler returned.
func runTask(t *testing.T, db *database, p *pipeline, prompt string) {
	t.Helper()
	id, err := insertTask(t.Context(), db, prompt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := waitFor(ctx, p.timed.done, id); err != nil {
		t.Fatal(err)
	}
}

// TestOursTellsTransactionsApartByConnection: a River transaction on one
// connection around a task's statements on another is dropped; a task's
// own transaction is kept, as is one still open with its statements.
func TestOursTellsTransactionsApartByConnection(t *testing.T) {
	t.Parallel()
	river, task := new(pgx.Conn), new(pgx.Conn)
	log := &statementLog{on: true}
	for _, s := range []statement{
		{sql: "begin", conn: river},
		{sql: "SELECT 1 -- claim", conn: task},
		{sql: "-- name: JobGetAvailable", conn: river},
		{sql: "SELECT 2 -- events", conn: task},
		{sql: "commit", conn: river},
		{sql: "begin", conn: task},
		{sql: "SELECT 3 -- in the task's transaction", conn: task},
		{sql: "begin", conn: river},
		{sql: "-- name: JobSetStateIfRunningMany", conn: river},
		{sql: "commit", conn: task},
		{sql: "rollback", conn: river},
		{sql: "begin", conn: task},
		{sql: "SELECT 4 -- still open", conn: task},
		{sql: "begin", conn: river},
	} {
		log.add(s.conn, s.pipeline, s.sql)
	}
	var got []string
	for _, s := range log.ours() {
		got = append(got, s.sql)
	}
	want := []string{"SELECT 1 -- claim", "SELECT 2 -- events", "begin", "SELECT 3 -- in the task's transaction", "commit",
		"begin", "SELECT 4 -- still open"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ours() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTaskStatementsKeepAGenericPlan: every statement on a build task's
// path is planned a few times per connection, then runs a generic plan.
// Postgres plans a prepared statement for its arguments five times, then
// keeps the generic plan unless it looks costlier; a text whose arguments
// decide between branches (a status compared with a parameter) looks
// costlier for good, and is planned again on every call.
func TestTaskStatementsKeepAGenericPlan(t *testing.T) {
	t.Parallel()
	// The planner weighs plans by the tables' statistics: those of a
	// service that has finished some thousands of builds, analyzed or not
	// yet (a young table, as in a service's first hour).
	for _, analyzed := range []bool{false, true} {
		t.Run(map[bool]string{false: "NotAnalyzed", true: "Analyzed"}[analyzed], func(t *testing.T) {
			t.Parallel()
			checkGenericPlans(t, analyzed)
		})
	}
}

func checkGenericPlans(t *testing.T, analyzed bool) {
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// Few connections, so each sees every statement many times.
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Earlier builds, written with triggers off, as a restore does.
	if _, err := pool.Exec(ctx, `BEGIN;
		SET LOCAL session_replication_role = replica;
		INSERT INTO ai_tasks (project_id, type, prompt, status)
			SELECT gen_random_uuid(), 'build', 'earlier', 'succeeded' FROM generate_series(1, 3000);
		INSERT INTO change_sets (task_id, project_id, status) SELECT id, project_id, 'applied' FROM ai_tasks;
		INSERT INTO change_set_entries (task_id, path, op, content, ord)
			SELECT task_id, 'src/f' || n || '.ts', 'write', '\x00', n FROM change_sets, generate_series(1, 3) n;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	if analyzed {
		if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
			t.Fatal(err)
		}
	}
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := &database{pool: pool, drop: func() {}}
	p, err := startPipeline(ctx, withDefaults(Options{Store: store, Concurrency: 2, toolStartDelay: 10 * time.Second}), db, fixedDelayModel(0), true)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before reading, so River's connections are idle too.
	stop := sync.OnceFunc(func() { p.stop(context.Background()) })
	t.Cleanup(stop)
	const tasks = 30
	for range tasks {
		runTask(t, db, p, "plans")
	}
	stop()
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	checked := 0
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
		if err != nil {
			t.Fatal(err)
		}
		type plans struct {
			sql             string
			generic, custom int64
		}
		list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (plans, error) {
			var s plans
			return s, row.Scan(&s.sql, &s.generic, &s.custom)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			// River's own queries are River's business.
			if strings.HasPrefix(strings.TrimSpace(s.sql), "-- name:") || s.generic+s.custom <= 5 {
				continue
			}
			checked++
			if s.custom > 5 {
				t.Errorf("planned for its arguments on each of %d calls (%d generic):\n%s", s.custom, s.generic, spaces.ReplaceAllString(s.sql, " "))
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no statement of ours ran more than five times on one connection in %d tasks", tasks)
	}
	t.Logf("%d statements ran more than five times on one of %d connections", checked, len(conns))
}
