package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/worker"
)

func (h *harness) status(t *testing.T, id uuid.UUID) agentsql.Status {
	t.Helper()
	task, err := agentsql.GetTask(t.Context(), h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}

func (h *harness) runStatuses(t *testing.T, id uuid.UUID) string {
	t.Helper()
	rows, _ := h.pool.Query(t.Context(), "SELECT status FROM task_runs WHERE task_id = $1 ORDER BY attempt", id)
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(runs, ",")
}

// jobState is the state of the River job holding the task's claim.
func (h *harness) jobState(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var state string
	if err := h.pool.QueryRow(t.Context(), `SELECT j.state::text FROM river_job j JOIN ai_tasks t ON t.river_job_id = j.id
		WHERE t.id = $1`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

func TestCancelReachesRunningLoop(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		scripted.Reply{Delay: 20 * time.Second, Content: "too late"})})
	id := h.insertTask(t, uuid.New(), "build", "write a long essay")
	poll.Until(t, "the model call", 10*time.Second, func() bool { return len(h.llm.Requests()) == 1 })

	start := time.Now()
	res, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionCancel, agentsql.ControlOpts{Actor: "tester"})
	if err != nil || res.Status != agentsql.StatusCancelled {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	// The job is finalized only once the running Work call has returned.
	poll.Until(t, "the running job to stop", time.Second, func() bool { return h.jobState(t, id) == "cancelled" })
	latency := time.Since(start)
	t.Logf("cancel → running loop stopped and job finalized: %s", latency)

	evs, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusCancelled || task.FinishedAt == nil {
		t.Fatalf("task = %s (finished %v), want cancelled", task.Status, task.FinishedAt)
	}
	if got := h.runStatuses(t, id); got != "cancelled" {
		t.Errorf("runs = %s, want cancelled", got)
	}
	if errs := payloadsOf[events.Error](t, evs); len(errs) != 0 {
		t.Errorf("a cancelled task recorded errors: %+v", errs)
	}
	phases := payloadsOf[events.AgentPhase](t, evs)
	if last := phases[len(phases)-1]; last.Phase != events.PhaseCancelled {
		t.Errorf("last phase = %+v, want cancelled", last)
	}
	var audited bool
	for _, l := range payloadsOf[events.Log](t, evs) {
		audited = audited || (l.Metadata["action"] == "cancel" && l.Metadata["outcome"] == "applied" && l.Metadata["actor"] == "tester")
	}
	if !audited {
		t.Error("no audit event for the cancel")
	}
	// Nothing the stopped attempt did on its way out changed the task.
	if st := h.status(t, id); st != agentsql.StatusCancelled {
		t.Errorf("status after the job stopped = %s", st)
	}
}

func TestRetryAndAnswer(t *testing.T) {
	t.Parallel()
	var leaky strings.Builder // the provider echoes every secret of the corpus
	for _, c := range redact.Corpus {
		leaky.WriteString(c.Text + "\n")
	}
	h := setup(t, setupOpts{responder: scripted.Queue(
		scripted.Reply{Status: 400, ErrorMessage: "bad request with key sk-live-0123456789abcdefXYZ; " + leaky.String()},
		llmtest.Text("fine the second time"),
		llmtest.Text("a question for you"),
		llmtest.Text("thanks for the answer"),
	)})
	id := h.insertTask(t, uuid.New(), "chat", "hello")
	evs, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusFailed {
		t.Fatalf("status = %s, want failed", task.Status)
	}
	// The provider echoed keys in its error: they reach no writer.
	for _, where := range []string{string(task.Error), h.runErrors(t, id), eventsText(evs)} {
		if strings.Contains(where, "sk-live-0123456789abcdefXYZ") {
			t.Fatalf("secret leaked: %s", where)
		}
		for _, c := range redact.Corpus {
			if strings.Contains(where, c.Secret) {
				t.Errorf("%s secret leaked: %s", c.Name, where)
			}
		}
	}
	if !strings.Contains(string(task.Error), redact.Mask) {
		t.Errorf("task error %s: want the key masked", task.Error)
	}

	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionRetry, agentsql.ControlOpts{Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the retried task to succeed", 30*time.Second, func() bool { return h.status(t, id) == agentsql.StatusSucceeded })
	task, _ = agentsql.GetTask(t.Context(), h.pool, id)
	if task.Error != nil || task.Attempt != 2 {
		t.Errorf("after retry: error %s attempt %d", task.Error, task.Attempt)
	}

	// Answer: a task awaiting input with an open question.
	asked := h.insertTask(t, uuid.New(), "chat", "ask me")
	poll.Until(t, "the second task", 30*time.Second, func() bool { return h.status(t, asked) == agentsql.StatusSucceeded })
	if _, err := h.pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'queued' WHERE id = $1`, asked); err == nil {
		t.Fatal("succeeded -> queued by UPDATE was accepted")
	}
	waiting := h.insertAwaiting(t)
	if _, err := agentsql.ControlTask(t.Context(), h.pool, waiting, agentsql.ActionAnswer, agentsql.ControlOpts{}); !errors.Is(err, agentsql.ErrInvalidAction) {
		t.Fatalf("answer without text: %v", err)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, waiting, agentsql.ActionAnswer, agentsql.ControlOpts{Answer: "use Go", Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	var answer, resolver string
	if err := h.pool.QueryRow(t.Context(), `SELECT answer, resolver FROM inbox_items WHERE task_id = $1 AND kind = 'await_user_input' AND status = 'closed'`,
		waiting).Scan(&answer, &resolver); err != nil || answer != "use Go" || resolver != "tester" {
		t.Fatalf("answered item: %q by %q, %v", answer, resolver, err)
	}
	poll.Until(t, "the answered task to run", 30*time.Second, func() bool { return h.status(t, waiting) == agentsql.StatusSucceeded })
}

// insertAwaiting creates a task that asked a question (until request_input
// exists in the loop, by hand): awaiting_input with an open inbox item.
func (h *harness) insertAwaiting(t *testing.T) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	err := pgx.BeginFunc(t.Context(), h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
			return err
		}
		projectID := uuid.New()
		// A task starts queued; it reaches awaiting_input through running.
		if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'which language?') RETURNING id`,
			projectID).Scan(&id); err != nil {
			return err
		}
		for _, st := range []string{"running", "awaiting_input"} {
			if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = $2 WHERE id = $1`, id, st); err != nil {
				return err
			}
		}
		_, err := tx.Exec(t.Context(), `INSERT INTO inbox_items (project_id, task_id, kind, title) VALUES ($1, $2, 'await_user_input', 'Which language?')`, projectID, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (h *harness) runErrors(t *testing.T, id uuid.UUID) string {
	t.Helper()
	rows, _ := h.pool.Query(t.Context(), "SELECT coalesce(error_message, '') FROM task_runs WHERE task_id = $1", id)
	msgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(msgs, "\n")
}

func eventsText(evs []events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.Write(ev.Payload)
	}
	return b.String()
}

// TestLeaseTakeover kills the worker running a task (its database
// connections cut, nothing more written) and checks that a second replica
// takes the task over within the lease plus a few seconds.
func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	h := setup(t, setupOpts{noService: true, responder: scripted.Queue(
		scripted.Reply{Delay: 30 * time.Second, Content: "the victim never gets this"},
		llmtest.Call("write_file", map[string]string{"path": "b.txt", "content": "b\n"}),
		llmtest.Call("finish", map[string]string{"summary": "wrote b.txt"}),
	)})
	ctx := t.Context()
	victimPool, killed := killablePool(t, h.url)
	victim := newService(t, h, victimPool, "victim", lease)
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = victim.Stop(sctx)
	})
	id := h.insertTaskVia(t, victimPool, uuid.New(), "build", "write b.txt")
	poll.Until(t, "the victim's model call", 15*time.Second, func() bool { return len(h.llm.Requests()) == 1 })
	survivor := newService(t, h, h.pool, "survivor", lease)
	if err := survivor.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := survivor.Stop(sctx); err != nil {
			t.Errorf("stop survivor: %v", err)
		}
	})

	killed.Store(true)
	if _, err := h.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'victim'`); err != nil {
		t.Fatal(err)
	}
	kill := time.Now()
	_, task := h.waitDone(t, id)
	var taken time.Time
	if err := h.pool.QueryRow(ctx, `SELECT max(started_at) FROM task_runs WHERE task_id = $1`, id).Scan(&taken); err != nil {
		t.Fatal(err)
	}
	t.Logf("kill → second replica claimed the task: %s (lease %s)", taken.Sub(kill), lease)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if d := taken.Sub(kill); d > lease+3*time.Second {
		t.Errorf("takeover took %s, want within lease + 3 s", d)
	}
	// On a starved machine the victim's renewal can miss its 2 s lease
	// before the kill; a takeover then happens earlier, never twice at once.
	if got := h.runStatuses(t, id); got != "interrupted,succeeded" && got != "interrupted,interrupted,succeeded" {
		t.Errorf("runs = %s", got)
	}
	var worker string
	if err := h.pool.QueryRow(ctx, `SELECT worker_id FROM task_runs WHERE task_id = $1 AND attempt = 1`, id).Scan(&worker); err != nil || worker != "victim" {
		t.Errorf("first run ran on %q, %v", worker, err)
	}
}

// killablePool is a pool whose new connections fail once killed is set;
// its existing ones are cut with pg_terminate_backend by application_name.
func killablePool(t *testing.T, url string) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "victim"
	killed := new(atomic.Bool)
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if killed.Load() {
			return errors.New("process killed")
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, killed
}

func newService(t *testing.T, h *harness, pool *pgxpool.Pool, id string, lease time.Duration) *worker.Service {
	t.Helper()
	lc := h.llm.Config()
	lc.MaxRetries = -1
	client, err := llm.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	// The victim's River client logs a storm of connection errors once killed.
	logger := slog.New(slog.DiscardHandler)
	if id != "victim" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	runner, err := handlers.NewRunner(handlers.Deps{Pool: pool, Store: h.store, LLM: client, Logger: logger}, handlers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := worker.New(pool, runner.Handlers(), worker.Config{ID: id, Concurrency: 2, Logger: logger, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (h *harness) insertTaskVia(t *testing.T, db *pgxpool.Pool, projectID uuid.UUID, taskType, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := db.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, $2, $3) RETURNING id`,
		projectID, taskType, prompt).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStopHandsBack: a task still running when Stop's grace period ends is
// handed back to the queue at once, and another replica finishes it.
func TestStopHandsBack(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{noService: true, responder: scripted.Queue(
		scripted.Reply{Delay: 30 * time.Second, Content: "cut short"},
		llmtest.Call("finish", map[string]string{"summary": "done elsewhere"}),
	)})
	first := newService(t, h, h.pool, "first", 30*time.Second)
	if err := first.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := h.insertTask(t, uuid.New(), "build", "finish")
	poll.Until(t, "the model call", 15*time.Second, func() bool { return len(h.llm.Requests()) == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st := h.status(t, id); st != agentsql.StatusQueued {
		t.Fatalf("status after a cut-short stop = %s, want queued", st)
	}
	if got := h.runStatuses(t, id); got != "interrupted" {
		t.Errorf("runs = %s, want interrupted", got)
	}
	second := newService(t, h, h.pool, "second", 30*time.Second)
	if err := second.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := second.Stop(sctx); err != nil {
			t.Errorf("stop second: %v", err)
		}
	})
	evs, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	if got := h.runStatuses(t, id); got != "interrupted,succeeded" {
		t.Errorf("runs = %s", got)
	}
	checkSeqs(t, evs, 1)
	handedBack := false
	for _, p := range payloadsOf[events.AgentPhase](t, evs) {
		handedBack = handedBack || (p.Phase == events.PhaseRetrying && strings.Contains(p.Summary, "first shutting down"))
	}
	if !handedBack {
		t.Error("no event says the task was handed back")
	}
}
