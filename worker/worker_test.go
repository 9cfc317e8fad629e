package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
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
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/worker"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}

type harness struct {
	url   string
	pool  *pgxpool.Pool
	store *storage.S3
	llm   *llmtest.Server
	svc   *worker.Service
}

type setupOpts struct {
	responder     scripted.Responder
	llmOpts       []llmtest.Option
	maxRetries    int
	maxIterations int
	apiKey        string
	logs          io.Writer // defaults to stderr at warn level
	workerConfig  worker.Config
	lease         time.Duration
	noService     bool  // the test starts its own worker services
	maxConns      int32 // the pool's size; defaults to pgxpool's
	concurrency   int   // defaults to 4
	prices        llm.Prices
	retryBackoff  time.Duration
	rateLimit     llm.RateLimitConfig
	dayCap        float64 // the projects' daily cost cap (PROJECT_MAX_COST_USD_PER_DAY)
	// dayCapRunnerOnly gives dayCap to the runner, not to the worker's
	// claim.
	dayCapRunnerOnly bool
}

// setup starts the whole pipeline against a real Postgres, a real MinIO and
// a scripted model speaking the Chat Completions protocol.
func setup(t *testing.T, o setupOpts) *harness {
	t.Helper()
	h := &harness{url: dbtest.NewURL(t)}
	var err error
	pcfg, err := pgxpool.ParseConfig(h.url)
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	if o.maxConns > 0 {
		pcfg.MaxConns = o.maxConns
	}
	h.pool, err = pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(h.pool.Close)
	h.store = s3test.NewStore(t)
	h.llm = llmtest.NewWith(t, o.responder, o.llmOpts...)
	lc := h.llm.Config()
	lc.MaxRetries = o.maxRetries
	lc.APIKey = o.apiKey
	lc.RateLimit = o.rateLimit
	if lc.MaxRetries == 0 {
		lc.MaxRetries = -1 // no retries inside a call unless the test asks
	}
	logs, level := o.logs, slog.LevelDebug
	if logs == nil {
		logs, level = os.Stderr, slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	lc.Logger = logger // the client's own logs must not carry the key either
	client, err := llm.New(lc)
	if err != nil {
		t.Fatalf("llm client: %v", err)
	}
	if o.noService {
		return h
	}
	ann := events.NewAnnouncer(h.pool, logger)
	runner, err := handlers.NewRunner(handlers.Deps{Pool: h.pool, Store: h.store, LLM: client, Logger: logger, Announcer: ann},
		// These tests pin the loop's own stops; handlers tests cover self-repair.
		handlers.Config{MaxIterations: o.maxIterations, MaxRepairAttempts: -1, Prices: o.prices, RetryBackoff: o.retryBackoff,
			ProjectMaxCostUSDPerDay: o.dayCap})
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	wc := o.workerConfig
	wc.Concurrency, wc.Logger, wc.Announcer = max(o.concurrency, 4), logger, ann
	if !o.dayCapRunnerOnly {
		wc.ProjectMaxCostUSDPerDay = o.dayCap
	}
	if o.lease != 0 {
		wc.Lease = o.lease
	}
	h.svc, err = worker.New(h.pool, runner.Handlers(), wc)
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	if err := h.svc.Start(t.Context()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.svc.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return h
}

// insertTask inserts a task with plain SQL, as any app would.
func (h *harness) insertTask(t *testing.T, projectID uuid.UUID, taskType, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, $2, $3) RETURNING id`,
		projectID, taskType, prompt).Scan(&id); err != nil {
		t.Fatalf("insert %s task: %v", taskType, err)
	}
	return id
}

// insertWithoutJob inserts a task whose River job the pickup trigger does
// not make, as a row copied in with triggers off, or a task another worker
// held, would be.
func (h *harness) insertWithoutJob(t *testing.T, projectID uuid.UUID, taskType, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	err := pgx.BeginFunc(t.Context(), h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
			return err
		}
		return tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, $2, $3) RETURNING id`,
			projectID, taskType, prompt).Scan(&id)
	})
	if err != nil {
		t.Fatalf("insert %s task without its job: %v", taskType, err)
	}
	return id
}

// waitDone follows the task's timeline until its terminal event and returns
// every event and the final row.
func (h *harness) waitDone(t *testing.T, id uuid.UUID) ([]events.Event, agentsql.Task) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var evs []events.Event
	err := events.Follow(ctx, h.pool, id, 0, func(ev events.Event) error {
		evs = append(evs, ev)
		if events.Terminal(ev) {
			return events.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow task %s: %v (events so far: %d)", id, err, len(evs))
	}
	task, err := agentsql.GetTask(t.Context(), h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs, task
}

func checkSeqs(t *testing.T, evs []events.Event, from int) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != from+i {
			t.Fatalf("event %d has seq %d, want %d (gap or duplicate)", i, ev.Seq, from+i)
		}
	}
}

func payloadsOf[T any](t *testing.T, evs []events.Event) []*T {
	t.Helper()
	var out []*T
	for _, ev := range evs {
		p, err := ev.Decode()
		if err != nil {
			t.Fatalf("decode event %d: %v", ev.Seq, err)
		}
		if v, ok := any(p).(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestBuildTaskFromPlainSQL(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Call("write_file", map[string]string{"path": "hello.txt", "content": "hi\n"}),
		scripted.Reply{Delay: 300 * time.Millisecond, ToolCalls: []llm.ToolCall{{Name: "read_file", Arguments: `{"path":"hello.txt"}`}}},
		llmtest.Call("finish", map[string]string{"summary": "Created hello.txt saying hi"}),
	)})

	// A raw LISTEN subscriber, started before the insert.
	listener, err := pgx.Connect(t.Context(), h.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(context.Background()) })
	if _, err := listener.Exec(t.Context(), "LISTEN agent_events"); err != nil {
		t.Fatal(err)
	}

	projectID := uuid.New()
	inserted := time.Now()
	id := h.insertTask(t, projectID, "build", "create hello.txt saying hi")

	// A late subscriber: follows the first events, stops, then resumes from
	// its cursor while the task is still running.
	var early []events.Event
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := events.Follow(ctx, h.pool, id, 0, func(ev events.Event) error {
		early = append(early, ev)
		if len(early) == 5 {
			return events.ErrStopFollowing
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pickup := early[0].CreatedAt.Sub(inserted)
	var resumed []events.Event
	if err := events.Follow(ctx, h.pool, id, early[len(early)-1].Seq, func(ev events.Event) error {
		resumed = append(resumed, ev)
		if events.Terminal(ev) {
			return events.ErrStopFollowing
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	all, task := h.waitDone(t, id)
	t.Logf("insert → claim event %s; insert → done %s; %d events", pickup, all[len(all)-1].CreatedAt.Sub(inserted), len(all))
	checkSeqs(t, all, 1)
	if got := append(append([]events.Event{}, early...), resumed...); len(got) != len(all) {
		t.Fatalf("early+resumed subscriber got %d events, want %d", len(got), len(all))
	} else {
		checkSeqs(t, got, 1)
	}

	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	var res handlers.Result
	if err := json.Unmarshal(task.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Summary != "Created hello.txt saying hi" || len(res.FilesChanged) != 1 || res.FilesChanged[0].Path != "hello.txt" {
		t.Errorf("result = %+v", res)
	}
	if task.TokensIn == 0 || task.TokensOut == 0 {
		t.Errorf("usage not recorded: in %d out %d", task.TokensIn, task.TokensOut)
	}
	content, _, err := h.store.Read(t.Context(), projectID.String(), "hello.txt")
	if err != nil || string(content) != "hi\n" {
		t.Fatalf("hello.txt in MinIO = %q, %v", content, err)
	}

	// Every stage entered and exited, in runner order.
	var stages []string
	for _, p := range payloadsOf[events.Progress](t, all) {
		if p.Kind == events.KindStageEnter {
			stages = append(stages, p.Stage)
		}
	}
	want := []string{"claim", "load_context", "assemble_prompt", "agent_loop", "final_response", "write_result", "cleanup"}
	if strings.Join(stages, ",") != strings.Join(want, ",") {
		t.Errorf("stages = %v, want %v", stages, want)
	}
	calls := payloadsOf[events.ToolCall](t, all)
	if len(calls) != 3 || calls[0].ToolName != "write_file" || !calls[0].Success {
		t.Errorf("tool_call events = %+v", calls)
	}
	if ups := payloadsOf[events.FileUpdate](t, all); len(ups) != 1 || ups[0].Op != events.OpCreate || ups[0].Path != "hello.txt" {
		t.Errorf("file_update events = %+v", ups)
	}

	// The raw listener was told about the task, by key only, after its
	// last event committed: announcements name tasks and projects, and a
	// subscriber reads the events from its cursor.
	for {
		wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("listener: no announcement of task %s after its last event: %v", id, err)
		}
		var key agentsql.Announcement
		if err := json.Unmarshal([]byte(n.Payload), &key); err != nil {
			t.Fatalf("notification payload %q: %v", n.Payload, err)
		}
		if !slices.Contains(key.Tasks, id) || !slices.Contains(key.Projects, projectID) {
			continue
		}
		rest, err := agentsql.TaskEventsAfter(t.Context(), h.pool, id, all[len(all)-1].Seq, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) == 0 {
			break // this announcement came after the last event
		}
	}

	// The scripted model was offered the write tools and asked to use tools.
	reqs := h.llm.Requests()
	if len(reqs) != 3 || !reqs[0].HasTool("write_file") {
		t.Fatalf("model got %d requests; first offers write_file: %v", len(reqs), len(reqs) > 0 && reqs[0].HasTool("write_file"))
	}
}

func TestChatTaskCannotWrite(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(
		llmtest.Call("write_file", map[string]string{"path": "evil.txt", "content": "x"}),
		llmtest.Text("I cannot write files in a chat task."),
	)})
	projectID := uuid.New()
	id := h.insertTask(t, projectID, "chat", "please write evil.txt")
	all, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	calls := payloadsOf[events.ToolCall](t, all)
	if len(calls) != 1 || calls[0].Success || !strings.Contains(calls[0].ResultSummary, "not allowed for chat tasks") {
		t.Fatalf("tool_call events = %+v, want one refused write_file", calls)
	}
	if _, _, err := h.store.Read(t.Context(), projectID.String(), "evil.txt"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("evil.txt was written (read err %v)", err)
	}
	if files, _ := h.store.List(t.Context(), projectID.String(), ""); len(files) != 0 {
		t.Fatalf("chat task left files: %v", files)
	}
	reqs := h.llm.Requests()
	if reqs[0].HasTool("write_file") || !reqs[0].HasTool("read_file") {
		t.Errorf("chat task was offered write_file or not read_file")
	}
}

func TestTaskFailures(t *testing.T) {
	t.Parallel()
	malformed := llmtest.Call("write_file", `{"path": "a.txt", "content": `)
	tests := []struct {
		name     string
		taskType string // default build
		prompt   string
		replies  []scripted.Reply
		wantCode string
		wantMsg  string
		wantReqs int
	}{
		{name: "EmptyPrompt", prompt: "  ", wantCode: handlers.CodeEmptyPrompt, wantMsg: "prompt is empty"},
		{name: "MalformedToolArguments", prompt: "x", replies: []scripted.Reply{malformed, malformed, malformed},
			wantCode: handlers.ReasonToolFailures, wantMsg: "not valid JSON", wantReqs: 3},
		{name: "UnknownTool", prompt: "x", replies: []scripted.Reply{llmtest.Call("rm_rf", "{}"), llmtest.Call("rm_rf", "{}"), llmtest.Call("rm_rf", "{}")},
			wantCode: handlers.ReasonToolFailures, wantMsg: `unknown tool "rm_rf"`, wantReqs: 3},
		{name: "ToolError", prompt: "x", replies: []scripted.Reply{
			llmtest.Call("read_file", `{"path":"missing.txt"}`), llmtest.Call("read_file", `{"path":"missing.txt"}`), llmtest.Call("read_file", `{"path":"../etc/passwd"}`)},
			wantCode: handlers.ReasonToolFailures, wantMsg: "invalid path", wantReqs: 3},
		// A chat task: for build, a 400 first triggers the tool_choice fallback.
		{name: "LLMBadRequest", taskType: "chat", prompt: "x", replies: []scripted.Reply{{Status: 400, ErrorMessage: "bad model"}},
			wantCode: handlers.CodeLLMError, wantMsg: "400", wantReqs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, setupOpts{responder: scripted.Queue(tt.replies...), maxIterations: 3})
			taskType := tt.taskType
			if taskType == "" {
				taskType = "build"
			}
			id := h.insertTask(t, uuid.New(), taskType, tt.prompt)
			all, task := h.waitDone(t, id)
			if task.Status != agentsql.StatusFailed {
				t.Fatalf("status = %s, want failed", task.Status)
			}
			var te handlers.TaskError
			if err := json.Unmarshal(task.Error, &te); err != nil {
				t.Fatalf("task error %s: %v", task.Error, err)
			}
			if te.Code != tt.wantCode || !strings.Contains(te.Message, tt.wantMsg) {
				t.Fatalf("task error = %+v, want code %s containing %q", te, tt.wantCode, tt.wantMsg)
			}
			errs := payloadsOf[events.Error](t, all)
			if len(errs) != 1 || errs[0].ErrorType != tt.wantCode || errs[0].Recoverable {
				t.Fatalf("error events = %+v", errs)
			}
			if got := len(h.llm.Requests()); got != tt.wantReqs {
				t.Errorf("model got %d requests, want %d", got, tt.wantReqs)
			}
			checkSeqs(t, all, 1)
		})
	}
}

func TestTransientLLMErrors(t *testing.T) {
	t.Parallel()
	t.Run("RateLimitedThenOK", func(t *testing.T) {
		t.Parallel()
		// 429 with Retry-After is retried inside the call by the client.
		h := setup(t, setupOpts{maxRetries: 2, responder: scripted.Queue(
			llmtest.Error(429, "0"), llmtest.Text("hello"))})
		id := h.insertTask(t, uuid.New(), "chat", "say hello")
		_, task := h.waitDone(t, id)
		if task.Status != agentsql.StatusSucceeded {
			t.Fatalf("status = %s, error %s", task.Status, task.Error)
		}
		if got := len(h.llm.Requests()); got != 2 {
			t.Errorf("model got %d requests, want 2", got)
		}
	})
	t.Run("RateLimitWaitedOutWithinTheAttempt", func(t *testing.T) {
		t.Parallel()
		// Refusals with Retry-After are waited out inside the call, with
		// no retries of the client's own: the task succeeds on its first
		// attempt, and its timeline says it waited for the provider.
		h := setup(t, setupOpts{responder: scripted.Queue(
			llmtest.Error(429, "2"), llmtest.Error(503, "1"), llmtest.Text("hello"))})
		project := uuid.New()
		id := h.insertTask(t, project, "chat", "say hello")
		all, task := h.waitDone(t, id)
		if task.Status != agentsql.StatusSucceeded || task.Attempt != 1 {
			t.Fatalf("status = %s after %d attempts, error %s; want succeeded on the first", task.Status, task.Attempt, task.Error)
		}
		if errs := payloadsOf[events.Error](t, all); len(errs) != 0 {
			t.Errorf("error events = %+v, want none", errs)
		}
		var waits []int64
		for _, p := range payloadsOf[events.Progress](t, all) {
			if p.Kind == events.KindRateLimitWait {
				waits = append(waits, p.Duration)
				if !strings.Contains(p.Message, "rate limit") {
					t.Errorf("wait message = %q", p.Message)
				}
			}
		}
		if len(waits) != 2 || waits[0] != 2000 || waits[1] != 1000 {
			t.Errorf("rate_limit_wait durations = %v ms, want [2000 1000]", waits)
		}
		checkSeqs(t, all, 1)
		// The run counts the time it waited, and the runs summary shows it.
		groups, err := agentsql.ProjectRunSummary(t.Context(), h.pool, project, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 1 || groups[0].Status != "succeeded" || groups[0].RateLimitWaitMS < 3000 {
			t.Errorf("runs summary = %+v, want one succeeded run that waited at least 3000 ms", groups)
		}
	})
	t.Run("ProviderBusyPastMaxWaitHandedBack", func(t *testing.T) {
		t.Parallel()
		// A provider asking for longer than LLM_RATE_LIMIT_MAX_WAIT hands
		// the attempt back with a typed, recoverable error; the task's own
		// budget of tries ends it.
		h := setup(t, setupOpts{responder: scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Error(429, "600") }),
			rateLimit: llm.RateLimitConfig{MaxWait: 5 * time.Second}, lease: 2 * time.Second, retryBackoff: 300 * time.Millisecond})
		id := h.insertTask(t, uuid.New(), "chat", "say hello")
		all, task := h.waitDone(t, id)
		var te handlers.TaskError
		if err := json.Unmarshal(task.Error, &te); err != nil || task.Status != agentsql.StatusFailed || te.Code != handlers.CodeLLMRateLimited || !te.Recoverable {
			t.Fatalf("status = %s, error %s (%v); want failed with a recoverable %s", task.Status, task.Error, err, handlers.CodeLLMRateLimited)
		}
		errs := payloadsOf[events.Error](t, all)
		if len(errs) == 0 || !errs[0].Recoverable || errs[0].ErrorType != handlers.CodeLLMRateLimited || !strings.Contains(errs[0].Message, "provider busy") {
			t.Errorf("first error event = %+v, want a recoverable %s saying the provider is busy", errs, handlers.CodeLLMRateLimited)
		}
	})
	t.Run("ProviderFailingForeverEnds", func(t *testing.T) {
		t.Parallel()
		// Every call answers 500. During the second try (a retry) the
		// task's lease lapses and the sweep takes the task over: that try
		// is cut short and does not count against the task's budget. The
		// budget still ends the task failed with a typed error after its
		// five tries: six attempts in all, one model call each (no retries
		// inside a call), the lapsed one's call included.
		var h *harness
		var calls atomic.Int64
		var takenOver atomic.Int64
		h = setup(t, setupOpts{responder: scripted.Func(func(*scripted.Request) scripted.Reply {
			if calls.Add(1) == 2 {
				// The holder renews its lease every third of it: lapse it
				// and sweep in one transaction, as a holder frozen past its
				// lease would be swept.
				err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(context.Background(), `UPDATE ai_tasks SET lease_expires_at = now() - interval '1 second'`+
						dbtest.AsWorker+`WHERE status = 'running'`); err != nil {
						return err
					}
					return tx.QueryRow(context.Background(), `SELECT count(*) FROM agentworker_take_over_lapsed(10)`).Scan(new(int64))
				})
				if err != nil {
					t.Errorf("lapse the lease: %v", err)
				}
				takenOver.Add(1)
			}
			return llmtest.Error(500, "")
		}), lease: 2 * time.Second, retryBackoff: 300 * time.Millisecond})
		id := h.insertTask(t, uuid.New(), "chat", "say hello")
		_, task := h.waitDone(t, id)
		var te handlers.TaskError
		if err := json.Unmarshal(task.Error, &te); err != nil || task.Status != agentsql.StatusFailed || te.Code != handlers.CodeLLMTransient || te.Attempt != 5 {
			t.Fatalf("status = %s, error %s (%v); want failed with %s after 5 tries", task.Status, task.Error, err, handlers.CodeLLMTransient)
		}
		if takenOver.Load() != 1 {
			t.Fatalf("the lease was lapsed %d times, want once", takenOver.Load())
		}
		var jobs, retries, waiting int
		var runs string
		if err := h.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM river_job WHERE kind = 'ai_task' AND args ->> 'task_id' = $1::uuid::text),
			retries, (SELECT count(*) FROM task_runs WHERE task_id = $1 AND status = 'retry_scheduled'),
			(SELECT string_agg(status || ':' || error_code, ',' ORDER BY attempt) FROM task_runs WHERE task_id = $1)
			FROM ai_tasks WHERE id = $1`, id).Scan(&jobs, &retries, &waiting, &runs); err != nil {
			t.Fatal(err)
		}
		// The takeover cancels the job of the lapsed try and enqueues one.
		if jobs != 2 || retries != 4 || waiting != 0 || runs != "interrupted:lease_lapsed,failed:"+handlers.CodeLLMTransient {
			t.Errorf("river jobs %d, retries %d, runs waiting %d, runs %s; want 2 jobs, 4 retries, none waiting, the lapsed run then one failed run",
				jobs, retries, waiting, runs)
		}
		if task.Attempt != 6 {
			t.Errorf("attempts = %d, want 6: five tries and the one cut short", task.Attempt)
		}
		if got := len(h.llm.Requests()); got != 6 {
			t.Errorf("model calls = %d, want 6: one per attempt", got)
		}
	})
	t.Run("ServerErrorRetriedByRiver", func(t *testing.T) {
		t.Parallel()
		// A 500 that outlives the client's retries fails the attempt; the
		// task waits queued for its retry with the same River job snoozed,
		// which claims it again and finishes it; the run waiting for its
		// retry goes on running (retry_scheduled -> running).
		h := setup(t, setupOpts{responder: scripted.Queue(
			llmtest.Error(500, ""), llmtest.Text("hello after a retry"))})
		id := h.insertTask(t, uuid.New(), "chat", "say hello")
		all, task := h.waitDone(t, id)
		if task.Status != agentsql.StatusSucceeded {
			t.Fatalf("status = %s, error %s", task.Status, task.Error)
		}
		if task.Attempt != 2 {
			t.Errorf("attempt = %d, want 2", task.Attempt)
		}
		errs := payloadsOf[events.Error](t, all)
		if len(errs) != 1 || !errs[0].Recoverable || errs[0].ErrorType != handlers.CodeLLMTransient {
			t.Errorf("error events = %+v, want one recoverable", errs)
		}
		var runs []string
		rows, _ := h.pool.Query(t.Context(), "SELECT status FROM task_runs WHERE task_id = $1 ORDER BY attempt", id)
		runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || strings.Join(runs, ",") != "succeeded" {
			t.Errorf("task_runs = %v, %v", runs, err)
		}
		var jobs, retries int
		if err := h.pool.QueryRow(t.Context(), `SELECT count(*), (SELECT retries FROM ai_tasks WHERE id = $1)
			FROM river_job WHERE kind = 'ai_task' AND args ->> 'task_id' = $1::uuid::text`, id).Scan(&jobs, &retries); err != nil || jobs != 1 || retries != 1 {
			t.Errorf("river jobs = %d, retries = %d, %v; want 1 job, 1 retry", jobs, retries, err)
		}
		checkSeqs(t, all, 1)
	})
}

func TestRequiredToolChoiceFallback(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{llmOpts: []llmtest.Option{llmtest.RejectRequiredToolChoice()}, responder: scripted.Queue(
		llmtest.Call("finish", map[string]string{"summary": "nothing to do"}))})
	id := h.insertTask(t, uuid.New(), "build", "do nothing")
	all, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	var res handlers.Result
	if err := json.Unmarshal(task.Result, &res); err != nil || !res.ToolChoiceFallback {
		t.Errorf("result = %s, want toolChoiceFallback", task.Result)
	}
	warned := false
	for _, l := range payloadsOf[events.Log](t, all) {
		warned = warned || strings.Contains(l.Message, `tool_choice "required"`)
	}
	if !warned {
		t.Error("no log event about the tool_choice fallback")
	}
}

func TestUnknownTypeRejectedByTable(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	_, err := pool.Exec(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'deploy', 'x')`, uuid.New())
	if err == nil || !strings.Contains(err.Error(), "ai_tasks_type_check") {
		t.Fatalf("insert of type deploy: err = %v, want the type CHECK violation", err)
	}
	var jobs int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM river_job").Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("river jobs after a rejected insert = %d, %v", jobs, err)
	}
}

func TestSecretsStayOutOfErrorsEventsAndLogs(t *testing.T) {
	t.Parallel()
	const secret = "sk-test-SECRETVALUE-0123456789"
	var logs logtest.Buffer
	h := setup(t, setupOpts{apiKey: secret, logs: &logs, responder: scripted.Queue(
		scripted.Reply{Status: 401, ErrorMessage: "Incorrect API key provided"})})
	id := h.insertTask(t, uuid.New(), "chat", "hello")
	all, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusFailed {
		t.Fatalf("status = %s", task.Status)
	}
	var te handlers.TaskError
	if err := json.Unmarshal(task.Error, &te); err != nil || te.Code != handlers.CodeLLMError || !strings.Contains(te.Message, "401") {
		t.Fatalf("task error = %s (%v)", task.Error, err)
	}
	// The key did reach the model server, so the test can fail.
	if got := h.llm.Requests()[0].Header.Get("Authorization"); !strings.Contains(got, secret) {
		t.Fatalf("model server saw Authorization %q", got)
	}
	if strings.Contains(string(task.Error), "SECRETVALUE") {
		t.Errorf("task error holds the API key: %s", task.Error)
	}
	for _, ev := range all {
		if strings.Contains(string(ev.Payload), "SECRETVALUE") {
			t.Errorf("event %d holds the API key: %s", ev.Seq, ev.Payload)
		}
	}
	if strings.Contains(logs.String(), "SECRETVALUE") {
		t.Errorf("logs hold the API key:\n%s", logs.String())
	}
}

func TestReconcilerEnqueuesOrphanedTasks(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder:    scripted.Queue(llmtest.Text("hi")),
		workerConfig: worker.Config{ReconcileInterval: 100 * time.Millisecond, ReconcileMinAge: time.Millisecond},
	})
	// A row that arrived without its job (as if copied in with triggers off).
	id := h.insertWithoutJob(t, uuid.New(), "chat", "hi")
	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
}

// TestStuckClaimIsPickedUpAgain: a worker that died between River's fetch
// and the claim's commit leaves the job running and the task queued; the
// reconciler gives the task a new job once ClaimTimeout passed, instead of
// River's rescuer waiting for the job timeout.
func TestStuckClaimIsPickedUpAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder: scripted.Queue(llmtest.Text("hi")),
		workerConfig: worker.Config{ReconcileInterval: 100 * time.Millisecond, ReconcileMinAge: time.Millisecond,
			ClaimTimeout: time.Second},
	})
	// The job as the dead worker left it: fetched (running), never claimed.
	var id uuid.UUID
	err := pgx.BeginFunc(t.Context(), h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
			return err
		}
		if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'hi') RETURNING id`, uuid.New()).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), `INSERT INTO river_job (args, kind, queue, max_attempts, priority, state, attempt, attempted_at, attempted_by)
			VALUES (jsonb_build_object('task_id', $1::uuid), 'ai_task', 'ai_tasks', 5, 1, 'running', 1, now(), '{dead-worker}')`, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	inserted := time.Now()
	_, task := h.waitDone(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	t.Logf("stuck claim picked up again after %s (claim timeout 1 s)", time.Since(inserted))
}

func TestDuplicateJobIsHarmless(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(llmtest.Text("hi"))})
	id := h.insertTask(t, uuid.New(), "chat", "hi")
	all, _ := h.waitDone(t, id)
	// A second job for the finished task: claimed as nothing to do.
	var jobID int64
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
		VALUES (jsonb_build_object('task_id', $1::uuid), 'ai_task', 'ai_tasks', 5, 1, 'available') RETURNING id`, id).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the duplicate job to complete", 10*time.Second, func() bool {
		var state string
		if err := h.pool.QueryRow(t.Context(), "SELECT state FROM river_job WHERE id = $1", jobID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state == "completed"
	})
	rows, err := agentsql.TaskEventsAfter(t.Context(), h.pool, id, 0, 1000)
	if err != nil || len(rows) != len(all) {
		t.Fatalf("events after the duplicate job: %d, want %d (%v)", len(rows), len(all), err)
	}
	if n := len(h.llm.Requests()); n != 1 {
		t.Fatalf("model got %d requests, want 1", n)
	}
}

func TestStopWaitsForRunningTasks(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(scripted.Reply{Content: "slow answer", Delay: 500 * time.Millisecond})})
	id := h.insertTask(t, uuid.New(), "chat", "hi")
	// Wait until the model is being asked, then stop the worker.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := events.Follow(ctx, h.pool, id, 0, func(ev events.Event) error {
		if p, _ := ev.Decode(); p != nil {
			if pr, ok := p.(*events.Progress); ok && pr.Kind == events.KindThinking {
				return events.ErrStopFollowing
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	task, err := agentsql.GetTask(t.Context(), h.pool, id)
	if err != nil || task.Status != agentsql.StatusSucceeded {
		t.Fatalf("after a graceful stop the task is %s (%v), want succeeded", task.Status, err)
	}
}

func TestSubmitFromGo(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{responder: scripted.Queue(llmtest.Text("hi"))})
	task, err := h.svc.Submit(t.Context(), agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	_, done := h.waitDone(t, task.ID)
	if done.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s", done.Status)
	}
	var jobs int
	if err := h.pool.QueryRow(t.Context(), "SELECT count(*) FROM river_job WHERE kind = 'ai_task'").Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("Submit made %d jobs (%v), want exactly 1 (the trigger must stand aside)", jobs, err)
	}
}

// TestProjectMaxRunning: with a cap of one running task a project, a
// project's backlog runs one at a time and another project's task, queued
// behind it, starts before the backlog's last.
func TestProjectMaxRunning(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOpts{
		responder: scripted.Func(func(*scripted.Request) scripted.Reply {
			return scripted.Reply{Content: "hi", Delay: 300 * time.Millisecond}
		}),
		workerConfig: worker.Config{ProjectMaxRunning: 1, ProjectCapSnooze: 200 * time.Millisecond},
	})
	a, b := uuid.New(), uuid.New()
	var backlog []uuid.UUID
	for range 4 {
		backlog = append(backlog, h.insertTask(t, a, "chat", "hi"))
	}
	other := h.insertTask(t, b, "chat", "hi")
	for _, id := range append(backlog, other) {
		if _, task := h.waitDone(t, id); task.Status != agentsql.StatusSucceeded {
			t.Fatalf("task %s: status %s, want succeeded", id, task.Status)
		}
	}
	rows, err := h.pool.Query(t.Context(), `SELECT t.project_id, r.Started_at, r.Finished_at FROM task_runs r
		JOIN ai_tasks t ON t.id = r.task_id ORDER BY r.Started_at`)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		Project           uuid.UUID
		Started, Finished time.Time
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[run])
	if err != nil {
		t.Fatal(err)
	}
	var lastA time.Time
	var startedB time.Time
	for i, r := range runs {
		if r.Project == b {
			startedB = r.Started
			continue
		}
		for _, o := range runs[i+1:] {
			if o.Project == a && o.Started.Before(r.Finished) {
				t.Errorf("project A ran two tasks at once: one %s–%s, another from %s", r.Started, r.Finished, o.Started)
			}
		}
		lastA = r.Started
	}
	if !startedB.Before(lastA) {
		t.Errorf("project B's task started at %s, after project A's last (%s): it waited for A's backlog", startedB, lastA)
	}
}
