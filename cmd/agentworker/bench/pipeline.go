package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/worker"
)

// instantModel answers at once: write_file on the first turn, finish after
// any tool result. One task is two LLM calls and one file write.
func instantModel() scripted.Responder {
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == llm.RoleTool {
			return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"wrote out.txt"}`}}}
		}
		return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x\n"}`}}}
	})
}

// iterationsModel calls list_files n times (on different paths), then finish.
func iterationsModel(n int) scripted.Responder {
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		calls := 0
		for _, m := range req.Messages {
			calls += len(m.ToolCalls)
		}
		if calls < n {
			// A different directory each time: the loop stops a model that
			// repeats itself.
			return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "list_files", Arguments: fmt.Sprintf(`{"path":"dir%d"}`, calls)}}}
		}
		return scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"done"}`}}}
	})
}

// timedHandlers wraps handlers to report when each task's handler starts
// and returns.
type timedHandlers struct {
	mu       sync.Mutex
	started  map[uuid.UUID]time.Time
	finished map[uuid.UUID]time.Time
	done     chan uuid.UUID
}

func newTimedHandlers() *timedHandlers {
	return &timedHandlers{started: map[uuid.UUID]time.Time{}, finished: map[uuid.UUID]time.Time{}, done: make(chan uuid.UUID, 100000)}
}

func (t *timedHandlers) wrap(hs map[agentsql.TaskType]handlers.Handler) map[agentsql.TaskType]handlers.Handler {
	out := map[agentsql.TaskType]handlers.Handler{}
	for k, h := range hs {
		out[k] = timedHandler{inner: h, t: t}
	}
	return out
}

type timedHandler struct {
	inner handlers.Handler
	t     *timedHandlers
}

func (h timedHandler) Handle(ctx context.Context, task agentsql.Task, at handlers.Attempt) error {
	now := time.Now()
	h.t.mu.Lock()
	if _, ok := h.t.started[task.ID]; !ok {
		h.t.started[task.ID] = now
	}
	h.t.mu.Unlock()
	err := h.inner.Handle(ctx, task, at)
	h.t.mu.Lock()
	h.t.finished[task.ID] = time.Now()
	h.t.mu.Unlock()
	h.t.done <- task.ID
	return err
}

func (t *timedHandlers) startedAt(id uuid.UUID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started[id]
}

func (t *timedHandlers) finishedAt(id uuid.UUID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished[id]
}

// pipeline is our worker over one scenario database.
type pipeline struct {
	db *database
	// closeModel stops the pipeline's model.
	closeModel func() error
	svc        *worker.Service
	timed      *timedHandlers
	llm        *llm.Client
}

func startPipeline(ctx context.Context, opts Options, db *database, responder scripted.Responder, start bool) (*pipeline, error) {
	model, err := scripted.ListenLoopback(responder)
	if err != nil {
		return nil, err
	}
	return startPipelineAt(ctx, opts, db, model.URL, model.Close, start)
}

// startPipelineAt is startPipeline against the model at modelURL;
// closeModel stops that model, with the pipeline or when it fails to start.
func startPipelineAt(ctx context.Context, opts Options, db *database, modelURL string, closeModel func() error, start bool) (*pipeline, error) {
	client, err := llm.New(llm.Config{BaseURL: modelURL, Model: "bench-instant", MaxRetries: -1, MaxIdleConns: opts.Concurrency})
	if err != nil {
		_ = closeModel()
		return nil, err
	}
	ann := events.NewAnnouncer(db.pool, opts.Logger)
	runner, err := handlers.NewRunner(handlers.Deps{Pool: db.pool, Store: opts.Store, LLM: client, Logger: opts.Logger, Announcer: ann},
		handlers.Config{MaxIterations: 50, ToolStartDelay: opts.toolStartDelay})
	if err != nil {
		_ = closeModel()
		return nil, err
	}
	timed := newTimedHandlers()
	svc, err := worker.New(db.pool, timed.wrap(runner.Handlers()), worker.Config{Concurrency: opts.Concurrency, ActiveLimit: opts.ActiveLimit,
		ProjectMaxRunning: opts.projectMaxRunning, Logger: opts.Logger, Announcer: ann, Tracing: opts.tracing})
	if err != nil {
		_ = closeModel()
		return nil, err
	}
	p := &pipeline{db: db, closeModel: closeModel, svc: svc, timed: timed, llm: client}
	if start {
		if err := svc.Start(ctx); err != nil {
			_ = closeModel()
			return nil, err
		}
	}
	return p, nil
}

func (p *pipeline) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = p.svc.Stop(sctx)
	_ = p.closeModel()
}

// startWarm starts the pipeline and runs one task through it, so that River
// and the pools are warm when a scenario's clock starts.
func startWarm(ctx context.Context, opts Options, db *database, responder scripted.Responder) (*pipeline, error) {
	p, err := startPipeline(ctx, opts, db, responder, true)
	if err != nil {
		return nil, err
	}
	warm, err := insertTask(ctx, db, "warm-up")
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = waitFor(wctx, p.timed.done, warm)
		cancel()
	}
	if err != nil {
		p.stop(ctx)
		return nil, err
	}
	return p, nil
}

// insertTask inserts a build task with plain SQL, as an app would.
func insertTask(ctx context.Context, db *database, prompt string) (uuid.UUID, error) {
	var id uuid.UUID
	err := db.pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', $2) RETURNING id`,
		uuid.New(), prompt).Scan(&id)
	if err != nil {
		return id, fmt.Errorf("insert task: %w", err)
	}
	return id, nil
}

func waitFor(ctx context.Context, ch <-chan uuid.UUID, id uuid.UUID) error {
	for {
		select {
		case got := <-ch:
			if got == id {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("wait for task %s: %w", id, ctx.Err())
		}
	}
}
