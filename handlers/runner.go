// Package handlers holds the chat, plan and build task handlers: the task
// runner with its phases (claim → load_context → assemble_prompt →
// agent_loop → final_response → write_result → cleanup), the agent loop, and
// (in sub-packages) the tools and the prompts.
package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Runner stages (build-agent-plan.md §1.2).
const (
	StageClaim          = "claim"
	StageLoadContext    = "load_context"
	StageAssemblePrompt = "assemble_prompt"
	StageAgentLoop      = "agent_loop"
	StageFinalResponse  = "final_response"
	StageWriteResult    = "write_result"
	StageCleanup        = "cleanup"
)

// Error codes written to ai_tasks.error and task_runs.error_code.
const (
	CodeEmptyPrompt  = "empty_prompt"
	CodeLLMError     = "llm_error"
	CodeLLMTransient = "llm_unavailable"
	CodeStorage      = "storage_error"
	CodeInternal     = "internal_error"
)

// Config tunes the runner.
type Config struct {
	// MaxIterations caps LLM calls per task. Defaults to 25.
	MaxIterations int
	// MaxToolFailures ends the loop after this many failed tool calls in a
	// row. Defaults to 3.
	MaxToolFailures int
	// ContextFiles caps the file list put in the system prompt. Defaults to 200.
	ContextFiles int
	// DisableStreaming makes LLM calls without streaming (no stream_delta
	// events). Defaults to false: streaming on.
	DisableStreaming bool
}

func (c Config) withDefaults() Config {
	if c.MaxIterations <= 0 {
		c.MaxIterations = 25
	}
	if c.MaxToolFailures <= 0 {
		c.MaxToolFailures = 3
	}
	if c.ContextFiles <= 0 {
		c.ContextFiles = 200
	}
	return c
}

// Deps are the services a runner uses.
type Deps struct {
	Pool   *pgxpool.Pool
	Store  storage.Store
	LLM    *llm.Client
	Logger *slog.Logger
	// Observer, if set, sees every event a task's loop writes (metrics).
	Observer events.Observer
}

// Attempt identifies the River attempt running a task.
type Attempt struct {
	JobID       int64
	Number      int // River's attempt number, from 1
	MaxAttempts int
	WorkerID    string
}

// Runner runs claimed tasks through the phases of the task runner.
type Runner struct {
	deps    Deps
	cfg     Config
	prompts *prompts.Set
}

// NewRunner validates deps and applies config defaults.
func NewRunner(deps Deps, cfg Config) (*Runner, error) {
	if deps.Pool == nil || deps.Store == nil || deps.LLM == nil {
		return nil, errors.New("new runner: Pool, Store and LLM are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	set, err := prompts.Load()
	if err != nil {
		return nil, err
	}
	return &Runner{deps: deps, cfg: cfg.withDefaults(), prompts: set}, nil
}

// Handler runs one claimed task of its type.
type Handler interface {
	Handle(ctx context.Context, task agentsql.Task, at Attempt) error
}

// typeSpec is what differs between task types.
type typeSpec struct {
	taskType   string
	toolChoice llm.ToolChoice
	phase      string // agent_phase role for the loop
}

type taskHandler struct {
	r    *Runner
	spec typeSpec
}

func (h taskHandler) Handle(ctx context.Context, task agentsql.Task, at Attempt) error {
	return h.r.run(ctx, h.spec, task, at)
}

// Handlers returns the handler of every task type, keyed by type. Chat and
// plan tasks get the read-only tools; build tasks every tool, and must call
// a tool each turn (tool_choice required) until they call finish.
func (r *Runner) Handlers() map[string]Handler {
	return map[string]Handler{
		"chat":  taskHandler{r, typeSpec{taskType: "chat", toolChoice: llm.ToolChoiceAuto, phase: events.PhaseReviewer}},
		"plan":  taskHandler{r, typeSpec{taskType: "plan", toolChoice: llm.ToolChoiceAuto, phase: events.PhasePlanner}},
		"build": taskHandler{r, typeSpec{taskType: "build", toolChoice: llm.ToolChoiceRequired, phase: events.PhaseCoder}},
	}
}

// taskError is a failure with a code for the task's error column.
type taskError struct {
	code string
	err  error
}

func (e *taskError) Error() string { return e.err.Error() }
func (e *taskError) Unwrap() error { return e.err }

// Result is what a succeeded task writes to ai_tasks.result.
type Result struct {
	Summary            string         `json:"summary"`
	FilesChanged       []FileChange   `json:"filesChanged"`
	Iterations         int            `json:"iterations"`
	Usage              llm.Usage      `json:"usage"`
	Model              string         `json:"model"`
	PromptVersion      string         `json:"promptVersion"`
	ToolChoiceFallback bool           `json:"toolChoiceFallback,omitempty"`
	Extra              map[string]any `json:"extra,omitempty"`
}

// FileChange is one entry of Result.FilesChanged.
type FileChange struct {
	Path     string `json:"path"`
	Op       string `json:"op"`
	FromPath string `json:"fromPath,omitempty"`
}

// TaskError is what a failed task writes to ai_tasks.error.
type TaskError struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	Recoverable bool   `json:"recoverable"`
	Attempt     int    `json:"attempt"`
}

func (r *Runner) run(ctx context.Context, spec typeSpec, task agentsql.Task, at Attempt) error {
	rec := events.NewRecorder(r.deps.Pool, task.ID, task.ProjectID)
	if r.deps.Observer != nil {
		rec.SetObserver(r.deps.Observer)
	}
	log := r.deps.Logger.With(slog.String("trace_id", TraceID(task)), slog.String("task_id", task.ID.String()),
		slog.String("run_id", RunID(task)), slog.String("task_type", task.Type), slog.Int("attempt", at.Number))

	var (
		final    string
		messages []llm.Message
		lp       *loop
	)
	err := func() error {
		var pctx prompts.Context
		if err := stage(ctx, rec, StageLoadContext, func() (err error) {
			if strings.TrimSpace(task.Prompt) == "" {
				return &taskError{CodeEmptyPrompt, errors.New("the task's prompt is empty: say what the agent should do")}
			}
			pctx, err = r.loadContext(ctx, task)
			return err
		}); err != nil {
			return err
		}
		if err := stage(ctx, rec, StageAssemblePrompt, func() error {
			system, err := r.prompts.System(spec.taskType, pctx)
			if err != nil {
				return &taskError{CodeInternal, err}
			}
			messages = []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: task.Prompt}}
			return nil
		}); err != nil {
			return err
		}
		registry, err := tools.ForTaskType(spec.taskType)
		if err != nil {
			return &taskError{CodeInternal, err}
		}
		lp = &loop{
			llm: r.deps.LLM, registry: registry, rec: rec, toolChoice: spec.toolChoice,
			env:           tools.Env{Store: r.deps.Store, ProjectID: task.ProjectID.String()},
			maxIterations: r.cfg.MaxIterations, maxToolFailures: r.cfg.MaxToolFailures,
			stream: !r.cfg.DisableStreaming, taskID: task.ID.String(),
		}
		if err := stage(ctx, rec, StageAgentLoop, func() error {
			if _, err := rec.Emit(ctx, events.AgentPhase{Phase: spec.phase, Action: "enter"}); err != nil {
				return err
			}
			final, messages, err = lp.run(ctx, messages)
			if err != nil {
				return err
			}
			_, err = rec.Emit(ctx, events.AgentPhase{Phase: spec.phase, Action: "exit"})
			return err
		}); err != nil {
			return err
		}
		return stage(ctx, rec, StageFinalResponse, func() error {
			if strings.TrimSpace(final) == "" {
				final = "Done."
			}
			return nil
		})
	}()
	if err != nil {
		return r.fail(ctx, rec, log, task, at, lp, err)
	}

	res := Result{Summary: final, FilesChanged: fileChanges(lp.changes), Iterations: lp.iterations,
		Usage: lp.usage, Model: r.deps.LLM.Model(), PromptVersion: prompts.Version, ToolChoiceFallback: lp.toolChoiceFallback}
	if err := r.writeResult(ctx, task, at, res); err != nil {
		return r.fail(ctx, rec, log, task, at, lp, err)
	}
	log.InfoContext(ctx, "task succeeded", slog.Int("iterations", lp.iterations), slog.Int64("tokens", lp.usage.TotalTokens))
	return nil
}

// stage wraps a phase in stage_enter / stage_exit events.
func stage(ctx context.Context, rec *events.Recorder, name string, fn func() error) error {
	if _, err := rec.Emit(ctx, events.Progress{Kind: events.KindStageEnter, Stage: name}); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	_, err := rec.Emit(ctx, events.Progress{Kind: events.KindStageExit, Stage: name})
	return err
}

func (r *Runner) loadContext(ctx context.Context, task agentsql.Task) (prompts.Context, error) {
	files, err := r.deps.Store.List(ctx, task.ProjectID.String(), "")
	if err != nil {
		return prompts.Context{}, &taskError{CodeStorage, fmt.Errorf("list project %s: %w", task.ProjectID, err)}
	}
	c := prompts.Context{ProjectID: task.ProjectID.String(), FileCount: len(files)}
	for i, f := range files {
		if i == r.cfg.ContextFiles {
			c.Truncated = true
			break
		}
		c.Files = append(c.Files, f.Path)
	}
	return c, nil
}

// writeResult moves the task to succeeded and writes the closing events in
// the same transaction, so a reader never sees one without the other.
func (r *Runner) writeResult(ctx context.Context, task agentsql.Task, at Attempt, res Result) error {
	body, err := json.Marshal(res)
	if err != nil {
		return &taskError{CodeInternal, fmt.Errorf("encode result of task %s: %w", task.ID, err)}
	}
	return pgx.BeginFunc(ctx, r.deps.Pool, func(tx pgx.Tx) error {
		rec := events.NewRecorder(tx, task.ID, task.ProjectID)
		if _, err := rec.Emit(ctx, events.Progress{Kind: events.KindStageEnter, Stage: StageWriteResult}); err != nil {
			return err
		}
		if _, err := agentsql.FinishTask(ctx, tx, task.ID, at.JobID, agentsql.Outcome{
			Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: body,
			TokensIn: res.Usage.PromptTokens, TokensOut: res.Usage.CompletionTokens, Model: res.Model,
		}); err != nil {
			return err
		}
		// Nothing to release yet; cleanup is recorded before the terminal
		// event so a follower that stops there has seen every stage.
		_, err := rec.Emit(ctx,
			events.Progress{Kind: events.KindStageExit, Stage: StageWriteResult},
			events.Progress{Kind: events.KindStageEnter, Stage: StageCleanup},
			events.Progress{Kind: events.KindStageExit, Stage: StageCleanup},
			events.AgentPhase{Phase: events.PhaseCompleted, Status: string(agentsql.StatusSucceeded), TaskType: task.Type, Model: res.Model, Summary: res.Summary},
		)
		return err
	})
}

// fail records a failed attempt. Transient faults with attempts left are
// returned to River, which retries the job with backoff; the task stays
// running under the same job. Anything else ends the task as failed and
// returns nil: the job did its work, the work failed.
func (r *Runner) fail(ctx context.Context, rec *events.Recorder, log *slog.Logger, task agentsql.Task, at Attempt, lp *loop, cause error) error {
	if errors.Is(cause, agentsql.ErrNotClaimed) {
		log.WarnContext(ctx, "task was taken over or cancelled while running; dropping this attempt")
		return nil
	}
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		// Cancelled or paused by a control action (agentworker_control_task),
		// which already moved the task and closed the run: keep the usage
		// spent so far, and stop without recording a failure.
		if lp != nil {
			if err := agentsql.AddRunUsage(context.WithoutCancel(ctx), r.deps.Pool, task.ID, task.Attempt,
				lp.usage.PromptTokens, lp.usage.CompletionTokens); err != nil {
				log.ErrorContext(ctx, "record usage of a stopped task", slog.String("err", err.Error()))
			}
		}
		log.InfoContext(ctx, "task stopped by a control action")
		return river.JobCancel(fmt.Errorf("task %s stopped by a control action: %w", task.ID, cause))
	}
	if ctx.Err() != nil {
		// Shutdown or job cancellation: River decides what happens next.
		return fmt.Errorf("run task %s: %w", task.ID, cause)
	}
	code, msg := classify(cause)
	msg = redact.String(msg) // it goes to the task's error, its run and an event
	transient := llm.IsTransient(cause) || isStorageTransient(cause)
	var usage llm.Usage
	if lp != nil {
		usage = lp.usage
	}
	wctx := context.WithoutCancel(ctx)
	if transient && at.Number < at.MaxAttempts {
		_, err := rec.Emit(wctx,
			events.Error{ErrorType: code, Message: msg, Recoverable: true},
			events.AgentPhase{Phase: events.PhaseRetrying, Status: string(agentsql.StatusRunning), Attempt: at.Number,
				Summary: fmt.Sprintf("attempt %d of %d failed; River will retry", at.Number, at.MaxAttempts)})
		if err != nil {
			log.ErrorContext(ctx, "record retry", slog.String("err", err.Error()))
		}
		if err := agentsql.RetryRun(wctx, r.deps.Pool, task.ID, task.Attempt, code, msg, usage.PromptTokens, usage.CompletionTokens); err != nil {
			log.ErrorContext(ctx, "record retry", slog.String("err", err.Error()))
		}
		return fmt.Errorf("run task %s (attempt %d): %w", task.ID, at.Number, cause)
	}
	body, _ := json.Marshal(TaskError{Code: code, Message: msg, Recoverable: transient, Attempt: at.Number})
	err := pgx.BeginFunc(wctx, r.deps.Pool, func(tx pgx.Tx) error {
		trec := events.NewRecorder(tx, task.ID, task.ProjectID)
		if _, err := trec.Emit(wctx, events.Error{ErrorType: code, Message: msg, Recoverable: false}); err != nil {
			return err
		}
		if _, err := agentsql.FinishTask(wctx, tx, task.ID, at.JobID, agentsql.Outcome{
			Status: agentsql.StatusFailed, RunStatus: "failed", Error: body, ErrorCode: code, ErrorMsg: msg,
			TokensIn: usage.PromptTokens, TokensOut: usage.CompletionTokens, Model: r.deps.LLM.Model(),
		}); err != nil {
			return err
		}
		_, err := trec.Emit(wctx, events.AgentPhase{Phase: events.PhaseFailed, Status: string(agentsql.StatusFailed), TaskType: task.Type, Summary: msg})
		return err
	})
	if errors.Is(err, agentsql.ErrNotClaimed) {
		log.WarnContext(ctx, "task was taken over or cancelled while failing; dropping this attempt")
		return nil
	}
	if err != nil {
		// The failure could not be recorded (database down): let River retry.
		return fmt.Errorf("record failure of task %s (%s): %w", task.ID, msg, err)
	}
	log.WarnContext(ctx, "task failed", slog.String("code", code), slog.String("error", msg))
	return nil
}

// TraceID is the trace a task's logs carry: the trace_id the app put in
// the task's input, or else the task id.
func TraceID(task agentsql.Task) string {
	var in struct {
		TraceID string `json:"trace_id"`
	}
	if json.Unmarshal(task.Input, &in) == nil && in.TraceID != "" {
		return in.TraceID
	}
	return task.ID.String()
}

// RunID names the task's current run: its task_runs idempotency key.
func RunID(task agentsql.Task) string {
	return fmt.Sprintf("%s/%d", task.ID, task.Attempt)
}

func classify(err error) (code, msg string) {
	var te *taskError
	var term *TerminationError
	var api *llm.APIError
	switch {
	case errors.As(err, &te):
		return te.code, te.err.Error()
	case errors.As(err, &term):
		return term.Reason, term.Error()
	case errors.As(err, &api):
		if api.Transient {
			return CodeLLMTransient, api.Error()
		}
		return CodeLLMError, api.Error()
	case llm.IsTransient(err):
		return CodeLLMTransient, err.Error()
	}
	return CodeInternal, err.Error()
}

// isStorageTransient reports storage failures worth a retry: anything from
// the store that is not a caller mistake.
func isStorageTransient(err error) bool {
	var te *taskError
	return errors.As(err, &te) && te.code == CodeStorage
}

func fileChanges(updates []events.FileUpdate) []FileChange {
	out := []FileChange{}
	for _, u := range updates {
		out = append(out, FileChange{Path: u.Path, Op: u.Op, FromPath: u.FromPath})
	}
	return out
}
