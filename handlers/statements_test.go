package handlers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

// The database work of one two-call build (write a file, finish): claim 1
// (the claim writes its events, reads the pause request and the project's
// daily cap and spend, which the first call goes by, and opens the change
// set), the context 1 (the project's documents rows and the task's
// dependencies' results, in one statement; the index is written only when
// a document changed), events 1, stage the write 1, checkpoint 2 (the
// iteration's events with the second iteration's start unless a pause was
// requested, and the checkpoint: one round trip), mark applying 1, finish 3
// (the events since, change set, task: one round trip). Statements sent
// together in one pipeline are one round trip. README quotes these
// figures (go test -update rewrites its sentence).
const buildStatements, buildRoundTrips = 10, 7

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

// record turns the log on or off.
func (l *statementLog) record(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
}

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
			strings.Contains(s.sql, "NOT EXISTS ( SELECT 1 FROM river_job j"),
			strings.Contains(s.sql, "agentworker_release_stranded"), strings.Contains(s.sql, "agentworker_resume_under_cap"),
			strings.Contains(s.sql, "agentworker_prepare_event_partitions"), strings.Contains(s.sql, "DELETE FROM project_day_spend"):
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
	// River's (its maintenance, say): its commit may come after the log is read.
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
// to its figure: every statement is a round trip and most are a commit,
// and at hundreds of tasks a second they are what the worker and Postgres
// spend their CPU on. A change that adds statements to a task's path, or
// saves some, fails here and says so in the figure README quotes.
//
// The project has no daily cap: its second call reads none, whether the
// memory of uncapped projects (DayCapRecheck) still holds or, as with a
// model slower than it, the checkpoint before the call said so.
func TestStatementsPerBuildTask(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		recheck time.Duration
	}{{"ModelFasterThanRecheck", 0}, {"ModelSlowerThanRecheck", time.Millisecond}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			countBuildStatements(t, tt.recheck)
		})
	}
}

func countBuildStatements(t *testing.T, dayCapRecheck time.Duration) {
	log := &statementLog{}
	p := startTraced(t, log, 0, 10, 50*time.Millisecond, dayCapRecheck)
	if err := p.svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A first task warms River and the pool; the second is counted, from
	// its insert until its work is done.
	p.run(t, "warm-up")
	log.record(true)
	p.run(t, "counted")
	log.record(false)
	got := log.ours()
	list := make([]string, len(got))
	for i, s := range got {
		list[i] = s.String()
	}
	if trips := roundTrips(got); len(got) != buildStatements || trips != buildRoundTrips {
		t.Errorf("one build task sent %d statements in %d round trips, want %d in %d:\n%s",
			len(got), trips, buildStatements, buildRoundTrips, strings.Join(list, "\n"))
	}
}

// buildStoreRequests are the requests a two-call build of a new project
// makes of the project store: the listing of its context, the lookup of
// out.txt's base version when it is first written, the read of what it
// holds before the apply (for a rollback), and the conditional write. The
// static checks before the finish take the context's listing, kept by the
// runner's list cache, with the build's changes over it. bench's River
// same writes make these requests too.
const buildStoreRequests = "List 1, Read 1, Stat 1, WriteIf 1"

// TestStoreRequestsPerBuildTask: a two-call build makes buildStoreRequests
// (a second listing, for the checks, was every build's).
func TestStoreRequestsPerBuildTask(t *testing.T) {
	t.Parallel()
	p := startTraced(t, nil, 0, 2, 0, 0)
	if err := p.svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p.store.Take()
		p.run(t, fmt.Sprintf("build %d", i))
		if got := p.store.Take(); got != buildStoreRequests {
			t.Errorf("build %d asked the store for %s, want %s", i, got, buildStoreRequests)
		}
	}
}

// readmeStatements is README's sentence quoting the statement figure.
var readmeStatements = regexp.MustCompile(`A two-call build sends (\d+) statements in (\d+) round trips`)

// TestReadmeQuotesTheStatementFigure: README's statement figure is the one
// TestStatementsPerBuildTask holds; go test -update rewrites it.
func TestReadmeQuotesTheStatementFigure(t *testing.T) {
	t.Parallel()
	const readme = "../README.md"
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	m := readmeStatements.FindSubmatch(text)
	if m == nil {
		t.Fatalf("%s has no sentence matching %q", readme, readmeStatements)
	}
	want := fmt.Sprintf("A two-call build sends %d statements in %d round trips", buildStatements, buildRoundTrips)
	if string(m[0]) == want {
		return
	}
	if *update {
		text = readmeStatements.ReplaceAll(text, []byte(want))
		if err := os.WriteFile(readme, text, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	n, _ := strconv.Atoi(string(m[1]))
	trips, _ := strconv.Atoi(string(m[2]))
	t.Errorf("%s quotes %d statements in %d round trips, the test holds %d in %d (go test -update rewrites it)",
		readme, n, trips, buildStatements, buildRoundTrips)
}

// tracedPipeline is the worker over a pool whose statements a test reads;
// what the test sends itself (an app's inserts, its polls) goes through a
// pool of its own, so that it is not counted.
type tracedPipeline struct {
	pool, app *pgxpool.Pool
	svc       *worker.Service
	store     *storagetest.Counting
	stopOnce  sync.Once
}

// startTraced builds, unstarted, the worker over a fresh database with
// tracer on its pool (nil: none), maxConns connections (0: pgx's default),
// and a model that answers after delay: write_file on the first turn,
// finish after any tool result; dayCapRecheck is the runner's (0: its
// default).
func startTraced(t *testing.T, tracer pgx.QueryTracer, maxConns int32, concurrency int, delay, dayCapRecheck time.Duration) *tracedPipeline {
	t.Helper()
	url := dbtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	p := &tracedPipeline{}
	if p.pool, err = pgxpool.NewWithConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.pool.Close)
	if p.app, err = pgxpool.New(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.app.Close)
	local, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p.store = storagetest.NewCounting(local)
	model := llmtest.NewWith(t, scripted.Func(func(req *scripted.Request) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"wrote out.txt"}`}}}
		}
		return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x\n"}`}}}
	}))
	lc := model.Config()
	lc.MaxRetries = -1
	client, err := llm.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	ann := events.NewAnnouncer(p.pool, logger)
	// A tool_start event is written only for a tool slower than
	// ToolStartDelay: a long one keeps a slow machine's write from adding one.
	runner, err := handlers.NewRunner(handlers.Deps{Pool: p.pool, Store: p.store, LLM: client, Logger: logger, Announcer: ann},
		handlers.Config{MaxIterations: 50, ToolStartDelay: 10 * time.Second, DayCapRecheck: dayCapRecheck})
	if err != nil {
		t.Fatal(err)
	}
	// A lease no task here outlives: its renewal is the clock's statement,
	// not the task's.
	p.svc, err = worker.New(p.pool, runner.Handlers(), worker.Config{Concurrency: concurrency, Logger: logger, Announcer: ann, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *tracedPipeline) stop(t *testing.T) {
	p.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.svc.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
}

// run inserts a build task as an app would and waits until its work is
// done: the task succeeded and River completed the job that ran it, the
// last statement a task causes.
func (p *tracedPipeline) run(t *testing.T, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := p.app.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', $2) RETURNING id`,
		uuid.New(), prompt).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var status agentsql.Status
	poll.Until(t, "task "+id.String()+" and its job done", time.Minute, func() bool {
		var job *string
		if err := p.app.QueryRow(t.Context(), `SELECT t.status, j.state::text FROM ai_tasks t
			LEFT JOIN river_job j ON j.id = t.river_job_id WHERE t.id = $1`, id).Scan(&status, &job); err != nil {
			t.Fatal(err)
		}
		return job != nil && *job == "completed"
	})
	if status != agentsql.StatusSucceeded {
		t.Fatalf("task %s ended %s, want %s", id, status, agentsql.StatusSucceeded)
	}
	return id
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
	// Few connections, so each sees every statement many times.
	p := startTraced(t, nil, 4, 2, 0, 0)
	// Earlier builds, written with triggers off, as a restore does.
	if _, err := p.app.Exec(ctx, `BEGIN;
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
		if _, err := p.app.Exec(ctx, `ANALYZE`); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const tasks = 30
	for range tasks {
		p.run(t, "plans")
	}
	// Stopped before reading, so River's connections are idle too.
	p.stop(t)
	conns := p.pool.AcquireAllIdle(ctx)
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
