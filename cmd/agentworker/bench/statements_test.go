package bench

import (
	"context"
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
	mu  sync.Mutex
	on  bool
	sql []string
}

var spaces = regexp.MustCompile(`\s+`)

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.sql = append(l.sql, spaces.ReplaceAllString(strings.TrimSpace(d.SQL), " "))
	}
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// ours drops River's own statements (they are named "-- name: …"), the
// announcer's NOTIFY (one per process every few ms, shared by every task)
// and the leader's periodic maintenance, which a task does not cause.
func (l *statementLog) ours() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.sql {
		switch {
		case strings.HasPrefix(s, "-- name:"), strings.HasPrefix(s, "SELECT pg_notify("),
			strings.Contains(s, "agentworker_flag_idle"), strings.Contains(s, "agentworker_take_over_lapsed"),
			strings.Contains(s, "NOT EXISTS ( SELECT 1 FROM river_job j"):
			continue
		}
		// A transaction left empty held only River's statements.
		if s == "commit" && len(out) > 0 && out[len(out)-1] == "begin" {
			out = out[:len(out)-1]
			continue
		}
		out = append(out, s)
	}
	return out
}

// TestStatementsPerBuildTask holds the database work of one two-call build
// (write a file, finish) to its budget: every statement is a round trip and
// most are a commit, and at hundreds of tasks a second they are what the
// worker and Postgres spend their CPU on. A change that adds statements to
// a task's path fails here and has to say why.
func TestStatementsPerBuildTask(t *testing.T) {
	t.Parallel()
	// claim 4 (begin, claim, its events, commit), open the change set 1,
	// pause check 1, events 1, stage the write 1, checkpoint 4 (begin,
	// events, checkpoint, commit), events 3, mark applying 1, finish 5
	// (begin, change set, events, task, commit).
	const budget = 21
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
	p, err := startPipeline(ctx, withDefaults(Options{Store: store, Concurrency: 10}), db, fixedDelayModel(50*time.Millisecond), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(context.Background()) })

	// A first task warms River and the pool; the second is counted.
	for i, prompt := range []string{"warm-up", "counted"} {
		log.mu.Lock()
		log.on = i == 1
		log.mu.Unlock()
		id, err := insertTask(ctx, db, prompt)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = waitFor(wctx, p.timed.done, id)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the handler returned; its job's completion is River's
	got := log.ours()
	// The insert is the app's, not the task's.
	if len(got) > 0 && strings.HasPrefix(got[0], "INSERT INTO ai_tasks") {
		got = got[1:]
	}
	if len(got) > budget {
		t.Errorf("one build task sent %d statements, budget %d:\n%s", len(got), budget, strings.Join(got, "\n"))
	} else {
		t.Logf("one build task sent %d statements (budget %d)", len(got), budget)
	}
}
