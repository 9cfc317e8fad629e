// Package handlers holds the chat, plan and build task handlers: the task
// runner with its phases (claim → load_context → assemble_prompt →
// agent_loop → final_response → write_result → cleanup), the agent loop, and
// (in sub-packages) the tools and the prompts.
package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/projectctx"
	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/redact"
	"github.com/agentworker/agentworker/sandbox"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
	"github.com/agentworker/agentworker/traceid"
	"github.com/agentworker/agentworker/tracing"
)

// Runner stages, in the order a run passes them; each writes stage_enter and
// stage_exit events.
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
	// CodeLLMRateLimited: the provider kept refusing for its rate limit
	// longer than LLM_RATE_LIMIT_MAX_WAIT; the task is handed back.
	CodeLLMRateLimited = "llm_rate_limited"
	CodeStorage        = "storage_error"
	CodeInternal       = "internal_error"
	// CodeModelUnpriced: the task's model has no price (LLM_PRICES).
	CodeModelUnpriced = "model_unpriced"
	// CodeConflict: a file the build changed was changed by someone else
	// meanwhile; nothing was applied.
	CodeConflict = "change_conflict"
	// CodePlanNotFound: input.plan_task_id names no succeeded plan task.
	CodePlanNotFound = "plan_not_found"
	// CodePlanInvalid: the plan task's model answered with no usable plan.
	CodePlanInvalid = "plan_invalid"
	// CodeExpectationMismatch: a plan step's result did not meet its
	// expectation; the task is blocked.
	CodeExpectationMismatch = "expectation_mismatch"
)

// Config tunes the runner.
type Config struct {
	// ReservedPaths are files the service writes into every project itself
	// (its tasks.md): the tools may read them, never change them. Defaults
	// to none.
	ReservedPaths []string
	// MaxIterations caps LLM calls per task: the iteration budget,
	// reaching which pauses the task. input.budget.max_iterations may
	// lower it, never raise it. Defaults to 25.
	MaxIterations int
	// MaxToolFailures ends the loop after this many failed tool calls in a
	// row. Defaults to 3.
	MaxToolFailures int
	// ContextFiles caps the file list put in the system prompt. Defaults to 200.
	ContextFiles int
	// FileCacheBytes bounds the file contents the process keeps, by project,
	// path and version, for search_files. Defaults to 64 MiB.
	FileCacheBytes int
	// DisableStreaming makes LLM calls without streaming (no stream_delta
	// events). Defaults to false: streaming on.
	DisableStreaming bool
	// MaxRepairAttempts is how often a stuck build (tool failures,
	// oscillation, failing static checks) is given a self-repair attempt.
	// Defaults to 2; negative disables self-repair.
	MaxRepairAttempts int
	// RepairBudget is the least number of iterations a repair attempt may
	// use, beyond MaxIterations if need be. Defaults to 5.
	RepairBudget int
	// ContextTokens is the estimated conversation size above which old
	// tool outputs are condensed. Defaults to 60000.
	ContextTokens int
	// Budget is the budget of a task and its ceiling: input.budget may
	// lower it field by field, never raise it (a zero field is no limit,
	// which input.budget may set). Its MaxIterations is ignored:
	// MaxIterations is the iteration budget. Defaults to no token or cost
	// limit.
	Budget Budget
	// ProjectMaxCostUSDPerDay is the daily cost cap of a project without
	// its own (project_settings): before each model call the project's
	// spend of the UTC day is read, and at the cap the task pauses with a
	// budget_exceeded inbox item. Defaults to 0: no cap.
	ProjectMaxCostUSDPerDay float64
	// DayCapRecheck is how long, with no ProjectMaxCostUSDPerDay, a project
	// found without a cap of its own is taken to have none before its
	// settings are read again: the model calls of uncapped projects read
	// nothing, and a cap the owner sets holds on running tasks within it.
	// Defaults to 1 second.
	DayCapRecheck time.Duration
	// Prices prices the model's usage for task cost and cost budgets. A
	// task whose own or agent's model is not listed fails
	// (CodeModelUnpriced) before calling it. Defaults to llm.DefaultPrices().
	Prices llm.Prices
	// ProjectChecks are the package.json scripts a build that changed
	// something runs in the sandbox before it may finish, those the project
	// has; a failure goes back to the model like a failing static check.
	// Defaults (nil) to typecheck, lint and test; empty and non-nil: none.
	ProjectChecks []string
	// RetryBackoff is the wait before the first retry of a transient
	// failure; it doubles with each retry, up to a minute. Defaults to 1 second.
	RetryBackoff time.Duration
	// ToolStartDelay is how long a tool runs before its tool_start event is
	// written on its own: a faster tool's start and result land in one
	// statement, a slower one shows as running. Defaults to 50 ms.
	ToolStartDelay time.Duration
	// ContextBudget is the bytes of a task's context in its system prompt:
	// the tasks view, the project's documents and the dependencies'
	// results together, trimmed in that order when over (taskContext.render).
	// The rules files have a budget of their own (projectctx.RulesBudget).
	// Defaults to DefaultContextBudget (48 KiB).
	ContextBudget int
	// TasksView is the path, in each project's files, of the task list the
	// service keeps (TASKS_MD_PATH), given in every task's context; ""
	// gives none. Defaults to none.
	TasksView string
	// RuleFallbacks are the rules file names a folder's rules are looked
	// for under after AGENTS.override.md and AGENTS.md, in order. Defaults
	// (nil) to CLAUDE.md; empty and non-nil: none.
	RuleFallbacks []string
}

func (c Config) withDefaults() Config {
	if c.MaxIterations <= 0 {
		c.MaxIterations = 25
	}
	if c.MaxToolFailures <= 0 {
		c.MaxToolFailures = 3
	}
	if c.FileCacheBytes <= 0 {
		c.FileCacheBytes = 64 << 20
	}
	if c.ContextFiles <= 0 {
		c.ContextFiles = 200
	}
	if c.ContextBudget <= 0 {
		c.ContextBudget = DefaultContextBudget
	}
	if c.RuleFallbacks == nil {
		c.RuleFallbacks = projectctx.DefaultRuleFallbacks
	}
	switch {
	case c.MaxRepairAttempts == 0:
		c.MaxRepairAttempts = 2
	case c.MaxRepairAttempts < 0:
		c.MaxRepairAttempts = 0
	}
	if c.DayCapRecheck <= 0 {
		c.DayCapRecheck = time.Second
	}
	if c.RepairBudget <= 0 {
		c.RepairBudget = 5
	}
	if c.ContextTokens <= 0 {
		c.ContextTokens = 60000
	}
	if c.Prices == nil {
		c.Prices = llm.DefaultPrices()
	}
	if c.ProjectChecks == nil {
		c.ProjectChecks = defaultProjectChecks
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = time.Second
	}
	if c.ToolStartDelay <= 0 {
		c.ToolStartDelay = 50 * time.Millisecond
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
	// Sandbox, if set, runs builds' run_command calls and project checks;
	// nil: commands are off (the tool is not offered).
	Sandbox *sandbox.Sandbox
	// Announcer, if set, announces a task's events after they committed,
	// so no task's transaction notifies (the process's one Announcer).
	// Without it the database's trigger notifies inside each transaction.
	Announcer *events.Announcer
}

// Attempt identifies the attempt running a task.
type Attempt struct {
	JobID int64
	// Fence is the epoch of the claim (sql.Fence): every write of the
	// attempt carries it.
	Fence int64
	// Number counts the task's tries since it was created or retried by a
	// person, from 1: its transient failures so far, plus one. Once it
	// reaches MaxAttempts a transient failure ends the task.
	Number      int
	MaxAttempts int
	WorkerID    string
	// NoCheckpoint: the claim saw that the task has no checkpoint, so the
	// attempt does not look for one (the zero value looks).
	NoCheckpoint bool
	// PauseRequested is the pause request the claim read, which the first
	// iteration boundary acts on; nil: that boundary reads it.
	PauseRequested *bool
	// ChangeSet is the build's change set as the claim opened it; nil: the
	// attempt opens it.
	ChangeSet *agentsql.OpenedChangeSet
	// EventsSince is the claim's lower bound of the task's events
	// (sql.Claim.EventsSince); zero: none.
	EventsSince time.Time
	// DayCap is the project's daily cap and day spend as the claim read
	// them (sql.Claim.DayCap, given the same default cap), which the first
	// iteration boundary uses; nil, or no cap where
	// Config.ProjectMaxCostUSDPerDay sets one: that boundary reads them.
	DayCap *agentsql.DayCap
}

// fence is the attempt's hold on its task.
func (at Attempt) fence(task agentsql.Task) agentsql.Fence {
	return agentsql.Fence{TaskID: task.ID, Epoch: at.Fence}
}

// openChangeSet returns the build's change set and its status: as the
// claim opened it, or opened now.
func (r *Runner) openChangeSet(ctx context.Context, task agentsql.Task, at Attempt) (*changeset.Set, string, error) {
	if oc := at.ChangeSet; oc != nil {
		return changeset.Opened(r.deps.Pool, r.deps.Store, at.fence(task), task.ProjectID, oc.Created), oc.Status, nil
	}
	return changeset.Open(ctx, r.deps.Pool, r.deps.Store, at.fence(task), task.ProjectID)
}

// Runner runs claimed tasks through the phases of the task runner.
type Runner struct {
	deps     Deps
	cfg      Config
	prompts  *prompts.Set
	files    *tools.Cache // shared by every task of the process
	uncapped *uncapped    // projects found without a daily cap
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
	cfg = cfg.withDefaults()
	// Every task of the process lists and writes through one ListCache, so
	// search_files need not list the project on every call.
	if _, ok := deps.Store.(*storage.ListCache); !ok {
		deps.Store = storage.NewListCache(deps.Store, storage.ListCacheConfig{})
	}
	return &Runner{deps: deps, cfg: cfg, prompts: set, files: tools.NewCache(cfg.FileCacheBytes),
		uncapped: newUncapped(cfg.DayCapRecheck)}, nil
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
func (r *Runner) Handlers() map[agentsql.TaskType]Handler {
	return map[agentsql.TaskType]Handler{
		agentsql.TypeChat:  taskHandler{r, typeSpec{taskType: "chat", toolChoice: llm.ToolChoiceAuto, phase: events.PhaseReviewer}},
		agentsql.TypePlan:  taskHandler{r, typeSpec{taskType: "plan", toolChoice: llm.ToolChoiceAuto, phase: events.PhasePlanner}},
		agentsql.TypeBuild: taskHandler{r, typeSpec{taskType: "build", toolChoice: llm.ToolChoiceRequired, phase: events.PhaseCoder}},
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
	Summary      string       `json:"summary"`
	FilesChanged []FileChange `json:"filesChanged"`
	Iterations   int          `json:"iterations"`
	Usage        llm.Usage    `json:"usage"`
	// CostUSD is the priced usage of every attempt (LLM_PRICES).
	CostUSD            float64 `json:"costUsd,omitempty"`
	Model              string  `json:"model"`
	PromptVersion      string  `json:"promptVersion"`
	ToolChoiceFallback bool    `json:"toolChoiceFallback,omitempty"`
	// Checks is the outcome of the static checks of a build's changes.
	Checks *verify.Report `json:"checks,omitempty"`
	// RepairAttempts is the number of self-repair attempts the build needed.
	RepairAttempts int `json:"repairAttempts,omitempty"`
	// Plan is the structured plan a plan task produced.
	Plan *Plan `json:"plan,omitempty"`
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

// run is one attempt at a task, in four stages: claim what an earlier
// attempt left (a checkpoint, a build's change set), give the model its
// context, run the loop, and finish with the result, a review, a
// suspension or a failure.
func (r *Runner) run(ctx context.Context, spec typeSpec, task agentsql.Task, at Attempt) error {
	ctx, tr := r.newTaskRun(ctx, task, at)
	// A checkpoint means an earlier attempt got somewhere: continue from it
	// (and keep its change set) instead of starting over.
	var (
		cp      agentsql.Checkpoint
		resumed bool
		err     error
	)
	if !at.NoCheckpoint {
		if cp, resumed, err = agentsql.LoadCheckpoint(ctx, r.deps.Pool, task.ID); err != nil {
			return tr.fail(ctx, err)
		}
	}
	if spec.taskType == "build" {
		if done, err := tr.takeChangeSet(ctx, resumed); done {
			return err
		}
		defer tr.closeWorkspaces(tr.log)
	}
	var conv conversation
	err = tr.converse(ctx, spec, cp, resumed, &conv)
	var susp *Suspension
	if errors.As(err, &susp) && tr.lp != nil {
		return tr.suspend(ctx, conv.messages, susp)
	}
	if err != nil {
		return tr.fail(ctx, err)
	}
	return tr.finish(ctx, conv)
}

// conversation is what the loop's stages hand on: the messages so far, the
// final answer and a plan task's plan.
type conversation struct {
	messages []llm.Message
	final    string
	plan     *Plan
}

// newTaskRun starts an attempt's record: its recorder, its logger and the
// pause request its claim read. The returned ctx carries the task's trace.
func (r *Runner) newTaskRun(ctx context.Context, task agentsql.Task, at Attempt) (context.Context, *taskRun) {
	rec := r.recorder(r.deps.Pool, task, at)
	if r.deps.Observer != nil {
		rec.SetObserver(r.deps.Observer)
	}
	// The model client's lines carry the trace through ctx; this logger's
	// carry it of their own.
	ctx = traceid.With(ctx, TraceID(task))
	log := r.deps.Logger.With(slog.String(traceid.Key, TraceID(task)), slog.String("task_id", task.ID.String()),
		slog.String("run_id", RunKey(task)), slog.String("task_type", string(task.Type)), slog.Int("attempt", at.Number))
	tr := &taskRun{runner: r, task: task, at: at, rec: rec, log: log, store: r.deps.Store}
	if p := at.PauseRequested; p != nil {
		read := *p
		tr.pauseRead = &read
	}
	if c := at.DayCap; c != nil {
		read := *c
		tr.dayCapRead = &read
	}
	return ctx, tr
}

// takeChangeSet opens a build's change set and its workspace. done: the
// attempt ended here, with err (an apply an earlier attempt began or an
// approval finished, or a failure recorded); otherwise the set is as the
// conversation left it (rewound to the checkpoint when resumed) and the
// caller closes the workspaces.
func (r *taskRun) takeChangeSet(ctx context.Context, resumed bool) (done bool, err error) {
	cs, status, err := r.runner.openChangeSet(ctx, r.task, r.at)
	if err != nil {
		return true, r.fail(ctx, err)
	}
	if status == agentsql.ChangeSetApplying {
		// An earlier attempt succeeded and crashed while applying.
		return true, r.resumeApply(ctx, cs)
	}
	if r.task.Approved && status == agentsql.ChangeSetOpen && !cs.Fresh() {
		// Approved in review: this attempt applies the staged set, nothing else.
		return true, r.applyApproved(ctx, cs)
	}
	reset := cs.Reset
	if resumed {
		// The conversation continues from the checkpoint: so do its changes.
		reset = cs.Rewind
	}
	if !cs.Fresh() {
		if err := reset(ctx); err != nil {
			return true, r.fail(ctx, err)
		}
	}
	r.cs, r.store = cs, cs
	r.openWorkspace()
	return false, nil
}

// converse runs the stages that talk to the model: the task's context, the
// prompt, the loop (from the checkpoint when resumed) and the final
// response. conv holds the conversation as far as it got, also on error.
func (r *taskRun) converse(ctx context.Context, spec typeSpec, cp agentsql.Checkpoint, resumed bool, conv *conversation) error {
	pctx, err := r.loadTaskContext(ctx, spec)
	if err != nil {
		return err
	}
	if conv.messages, err = r.assemblePrompt(ctx, spec, pctx); err != nil {
		return err
	}
	if err := r.buildLoop(ctx, spec); err != nil {
		return err
	}
	if resumed && r.plan == nil {
		if conv.messages, err = r.resumeFrom(ctx, cp); err != nil {
			return err
		}
		if r.cs != nil {
			if conv.messages, err = r.withFeedback(ctx, conv.messages, cp.UpdatedAt); err != nil {
				return err
			}
		}
	}
	if err := r.agentLoop(ctx, spec, conv); err != nil {
		return err
	}
	return r.finalResponse(ctx, spec, conv)
}

// agentLoop is the agent-loop stage: a plan-driven build's steps, a
// build's loop with its checks and repairs, or the plain loop.
func (r *taskRun) agentLoop(ctx context.Context, spec typeSpec, conv *conversation) error {
	return stage(ctx, r.rec, StageAgentLoop, func() error {
		r.rec.Add(events.AgentPhase{Phase: spec.phase, Action: "enter", TraceID: TraceID(r.task)})
		var err error
		switch {
		case r.plan != nil:
			conv.final, conv.messages, err = r.runPlan(ctx, conv.messages)
		case r.cs != nil:
			conv.final, conv.messages, err = r.repairLoop(ctx, conv.messages)
		default:
			conv.final, conv.messages, err = r.lp.run(ctx, conv.messages)
		}
		if err != nil {
			return err
		}
		r.rec.Add(events.AgentPhase{Phase: spec.phase, Action: "exit"})
		return nil
	})
}

// finalResponse is the final-response stage: a plan task's structured plan
// (and the tasks it creates), and the answer, "Done." when the model gave
// none.
func (r *taskRun) finalResponse(ctx context.Context, spec typeSpec, conv *conversation) error {
	return stage(ctx, r.rec, StageFinalResponse, func() error {
		if spec.taskType == "plan" {
			var err error
			if conv.plan, err = r.runner.structuredPlan(ctx, r.lp, conv.messages, r.expand); err != nil {
				return err
			}
			if len(conv.plan.Tasks) > 0 {
				r.children = conv.plan.plannedTasks(r.expand)
			}
			if strings.TrimSpace(conv.final) == "" || conv.plan.Summary != "" {
				conv.final = conv.plan.Summary
			}
		}
		if strings.TrimSpace(conv.final) == "" {
			conv.final = "Done."
		}
		return nil
	})
}

// loadTaskContext is the load-context stage: the build's plan, the task's
// agent, the project's summary and rules, and the task's own context (the
// tasks view, documents, dependencies).
func (r *taskRun) loadTaskContext(ctx context.Context, spec typeSpec) (pctx prompts.Context, err error) {
	rn, task := r.runner, r.task
	err = stage(ctx, r.rec, StageLoadContext, func() (err error) {
		if strings.TrimSpace(task.Prompt) == "" {
			return &taskError{CodeEmptyPrompt, errors.New("the task's prompt is empty: say what the agent should do")}
		}
		if spec.taskType == "build" {
			if r.plan, err = rn.loadPlan(ctx, task); err != nil {
				return err
			}
		}
		if r.agent, r.expand, err = rn.agentsOf(ctx, task); err != nil {
			return err
		}
		var sum projectctx.Summary
		pctx, sum, err = rn.loadContext(ctx, r.store, task, r.plan)
		r.rules = newProjectRules(sum.Rules)
		if err != nil {
			return err
		}
		rows, deps, err := agentsql.ReadTaskContext(ctx, rn.deps.Pool, task.ProjectID, task.ID)
		if err != nil {
			return err
		}
		// The listing shows the project as stored unless the build has
		// staged changes already (a resumed one).
		listed := r.cs == nil || r.cs.Fresh()
		r.context = taskContext{tasksPath: rn.cfg.TasksView, tasksView: rn.loadTasksView(ctx, task, sum, r.log),
			docs: rn.loadDocuments(ctx, r.store, task, sum.Documents, listed, rows, r.log), deps: deps}
		return nil
	})
	return pctx, err
}

// assemblePrompt is the assemble-prompt stage: the system prompt (the
// type's, the agent's persona, the root rules, the task's context within
// its budget) and the task's prompt.
func (r *taskRun) assemblePrompt(ctx context.Context, spec typeSpec, pctx prompts.Context) (messages []llm.Message, err error) {
	rn := r.runner
	err = stage(ctx, r.rec, StageAssemblePrompt, func() error {
		system, err := rn.prompts.System(spec.taskType, pctx)
		if err != nil {
			return &taskError{CodeInternal, err}
		}
		if r.agent != nil {
			system += agentSection(r.agent)
		}
		rules, err := r.rules.rootSection(ctx, r.store, r.task.ProjectID.String())
		if err != nil {
			return &taskError{CodeStorage, err}
		}
		text, trimmed := r.context.render(rn.cfg.ContextBudget)
		if len(trimmed) > 0 {
			r.rec.Add(events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("the task's context was trimmed to its budget of %d bytes: %s",
				rn.cfg.ContextBudget, strings.Join(trimmed, "; ")), Metadata: map[string]any{"contextBudget": rn.cfg.ContextBudget, "trimmed": trimmed}})
		}
		system += rules + text
		messages = []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: r.task.Prompt}}
		return nil
	})
	return messages, err
}

// buildLoop makes the run's loop (r.lp): the tools its type, the sandbox
// and its agent allow, its policy and budget, its model and price, and the
// run's hooks at each iteration.
func (r *taskRun) buildLoop(ctx context.Context, spec typeSpec) error {
	rn, task := r.runner, r.task
	registry, err := tools.ForTaskType(spec.taskType)
	if err != nil {
		return &taskError{CodeInternal, err}
	}
	if rn.deps.Sandbox == nil {
		registry = registry.Without(tools.RunCommand)
	}
	if r.agent != nil && r.agent.Tools != nil {
		registry = registry.Only(r.agent.Tools)
	}
	pol, err := rn.policyOf(ctx, task)
	if err != nil {
		return err
	}
	calls := pol.calls
	if r.agent != nil {
		agentCalls, err := tools.ParseCallPolicy(r.agent.ToolPolicy)
		if err != nil {
			return &taskError{CodeInvalidInput, fmt.Errorf("the agent %s of task %s: %w", r.agent.ID, task.ID, err)}
		}
		if len(agentCalls) > 0 {
			calls = append(calls, agentCalls)
		}
	}
	// The task's input or its agent asks for review.
	r.review = (pol.review || r.agent != nil && r.agent.Review) && r.cs != nil
	model := task.Model
	if model == "" && r.agent != nil {
		model = r.agent.Model
	}
	// A model the task or its agent names (by SQL, past the API's check)
	// must have a price, or no cost budget would stop it: the task fails
	// before its first call. The worker's own model is the operator's,
	// checked when the worker starts.
	if model != "" && model != rn.deps.LLM.Model() {
		if err := rn.cfg.Prices.Check(model); err != nil {
			return &taskError{CodeModelUnpriced, fmt.Errorf("task %s: %w", task.ID, err)}
		}
	}
	price, _ := rn.cfg.Prices.Lookup(cmp.Or(model, rn.deps.LLM.Model()))
	lp := &loop{
		llm: rn.deps.LLM, model: model, registry: registry, rec: r.rec, toolChoice: spec.toolChoice,
		env: tools.Env{Store: r.store, ProjectID: task.ProjectID.String(),
			Cache: rn.files, Images: rn.deps.LLM, Scope: pol.scope, Reserved: rn.cfg.ReservedPaths, Workspace: r.ws},
		maxIterations: pol.budget.MaxIterations, maxToolFailures: rn.cfg.MaxToolFailures,
		stream: !rn.cfg.DisableStreaming, taskID: task.ID.String(), contextTokens: rn.cfg.ContextTokens,
		budget: pol.budget, ceiling: pol.ceiling, price: price, toolStartDelay: rn.cfg.ToolStartDelay,
		rules: r.rules, log: r.log, policies: calls,
	}
	r.lp = lp
	lp.before, lp.alert = r.beforeIteration, r.alert
	if r.plan != nil {
		// Its next attempt replays the plan's steps, not this conversation:
		// nothing would give the model the answers.
		lp.noAsk = "this build follows a plan and cannot wait for approval; asked calls are refused"
	}
	if r.plan == nil {
		// A plan-driven build resumes by its recorded decisions instead.
		lp.after = r.checkpoint
	}
	if r.cs != nil {
		lp.beforeFinish = r.checkBeforeFinish
	}
	return nil
}

// finish ends a conversation that succeeded: in review when the build
// asks for one, else with its result written (and a build's change set
// applied).
func (r *taskRun) finish(ctx context.Context, conv conversation) error {
	lp := r.lp
	res := Result{Summary: conv.final, FilesChanged: fileChanges(lp.changes), Iterations: lp.iterations,
		Usage: lp.usage, CostUSD: lp.cost, Model: cmp.Or(lp.model, r.runner.deps.LLM.Model()), PromptVersion: prompts.Version, ToolChoiceFallback: lp.toolChoiceFallback,
		Checks: r.checks, RepairAttempts: r.repairs, Plan: conv.plan}
	if r.review {
		if err := r.finishReview(ctx, res, conv.messages); err != nil {
			return r.fail(ctx, err)
		}
		r.log.InfoContext(ctx, "task waits for review", slog.Int("iterations", lp.iterations))
		return nil
	}
	// What is still queued (the last tool's result, the stages since) is
	// written first in the finish's round trip, or by fail.
	if err := r.writeResult(ctx, res); err != nil {
		return r.fail(ctx, err)
	}
	r.log.InfoContext(ctx, "task succeeded", slog.Int("iterations", lp.iterations), slog.Int64("tokens", lp.usage.TotalTokens))
	return nil
}

// stage wraps a phase in stage_enter / stage_exit events. They are queued,
// not written: the next wait (an LLM call, a tool, the result) writes them
// with whatever else happened since, in one statement.
func stage(_ context.Context, rec *events.Recorder, name string, fn func() error) error {
	rec.Add(events.Progress{Kind: events.KindStageEnter, Stage: name})
	if err := fn(); err != nil {
		return err
	}
	rec.Add(events.Progress{Kind: events.KindStageExit, Stage: name})
	return nil
}

func (r *Runner) loadContext(ctx context.Context, files projectctx.Files, task agentsql.Task, plan *Plan) (prompts.Context, projectctx.Summary, error) {
	sum, err := projectctx.Build(ctx, files, task.ProjectID.String(), projectctx.Options{MaxFiles: r.cfg.ContextFiles,
		RuleNames: projectctx.RuleNames(r.cfg.RuleFallbacks)})
	if err != nil {
		return prompts.Context{}, sum, &taskError{CodeStorage, fmt.Errorf("project %s: %w", task.ProjectID, err)}
	}
	c := prompts.Context{ProjectID: task.ProjectID.String(), Files: sum.Files, FileCount: sum.FileCount, Truncated: sum.Truncated,
		ProjectType: sum.Type, TypeScript: sum.TypeScript, Tooling: sum.Tooling, EntryPoints: sum.EntryPoints, RecentFiles: sum.RecentFiles}
	if plan != nil {
		c.PlanSummary = plan.Text()
	}
	return c, sum, nil
}

// writeResult applies a build's change set and moves the task to
// succeeded, writing the closing events in the same transaction, so a
// reader never sees one without the other.
func (r *taskRun) writeResult(ctx context.Context, res Result) error {
	// The usage not yet counted by a checkpoint goes with the result.
	spend := r.lp.unrecorded()
	var applied []agentsql.ChangeEntry
	if r.cs != nil {
		entries, err := r.cs.Entries(ctx)
		if err != nil {
			return err
		}
		res.FilesChanged = entryChanges(entries)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return &taskError{CodeInternal, fmt.Errorf("encode result of task %s: %w", r.task.ID, err)}
	}
	if r.cs != nil {
		// Once decided, applying is not interrupted by a cancel: a half
		// applied set would be worse than a finished one.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		applied, err = r.cs.Apply(actx, body)
		if errors.Is(err, storage.ErrConflict) {
			return &taskError{CodeConflict, err}
		}
		if err != nil {
			return &taskError{CodeStorage, err}
		}
		ctx = actx
	}
	if err := r.finishSucceeded(ctx, body, spend, res.Model, res.Summary, len(applied), r.cs != nil); err != nil {
		return err
	}
	r.reindexAfterApply(ctx, applied)
	return nil
}

// resumeApply finishes cs, which an earlier attempt began to apply. A
// failure here leaves cs as it is: it is not the run's to discard.
func (r *taskRun) resumeApply(ctx context.Context, cs *changeset.Set) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	entries, err := cs.Resume(actx)
	if errors.Is(err, storage.ErrConflict) {
		// Someone wrote a file of the set after its check: retrying would
		// overwrite them, so the task ends with the conflict.
		return r.fail(ctx, &taskError{CodeConflict, err})
	}
	if err != nil {
		return r.fail(ctx, &taskError{CodeStorage, err})
	}
	_, body, err := agentsql.ChangeSetState(actx, r.runner.deps.Pool, r.task.ID)
	if err != nil {
		return r.fail(ctx, err)
	}
	var res Result
	_ = json.Unmarshal(body, &res)
	r.log.InfoContext(ctx, "finished applying the change set of an interrupted attempt", slog.Int("files", len(entries)))
	// The usage was counted by the attempt that made the changes.
	if err := r.finishSucceeded(actx, body, agentsql.Spend{}, res.Model, res.Summary, len(entries), true); err != nil {
		return r.fail(ctx, err)
	}
	r.reindexAfterApply(actx, entries)
	return nil
}

// recorder returns a Recorder of task's events writing through db, fenced
// by the attempt's claim and announced by the process's Announcer.
func (r *Runner) recorder(db agentsql.DBTX, task agentsql.Task, at Attempt) *events.Recorder {
	return events.NewRecorder(db, task.ID, task.ProjectID, events.WithFence(at.Fence), events.WithAnnouncer(r.deps.Announcer),
		events.WithEventsSince(at.EventsSince))
}

// finishSucceeded moves the task to succeeded with its closing events, in
// one round trip and one transaction: what the run's recorder still has
// queued, then the closing events, then the statements. spend is the usage
// not yet counted by checkpoints.
func (r *taskRun) finishSucceeded(ctx context.Context, body []byte, spend agentsql.Spend, model, summary string, applied int, hasSet bool) error {
	// The events come first: once the task left running, its fence
	// refuses them. Cleanup is recorded before the terminal event so a
	// follower that stops there has seen every stage.
	evs := []events.Payload{events.Progress{Kind: events.KindStageEnter, Stage: StageWriteResult}}
	if hasSet {
		evs = append(evs, events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("change set applied: %d file change(s)", applied),
			Metadata: map[string]any{"applied": applied}})
	}
	evs = append(evs,
		events.Progress{Kind: events.KindStageExit, Stage: StageWriteResult},
		events.Progress{Kind: events.KindStageEnter, Stage: StageCleanup},
		events.Progress{Kind: events.KindStageExit, Stage: StageCleanup},
		events.AgentPhase{Phase: events.PhaseCompleted, Status: string(agentsql.StatusSucceeded), TaskType: string(r.task.Type), Model: model, Summary: summary,
			TraceID: TraceID(r.task)},
	)
	_, err := r.rec.InPipeline(ctx, r.runner.deps.Pool, func(p *agentsql.Pipeline) error {
		if len(r.children) > 0 {
			if err := agentsql.QueueExpandPlan(p, r.at.fence(r.task), r.children, tracing.SpanID(ctx)); err != nil {
				return err
			}
		}
		if hasSet {
			if err := agentsql.QueueFinishChangeSet(p, r.at.fence(r.task), agentsql.ChangeSetApplied, false); err != nil {
				return err
			}
		}
		return agentsql.QueueFinishTask(p, r.at.fence(r.task), agentsql.Outcome{
			Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Result: body,
			TokensIn: spend.TokensIn, TokensOut: spend.TokensOut, Cost: spend.Cost, RateWait: spend.RateWait, Model: model,
		})
	}, evs...)
	return err
}

// fail records a failed attempt. A transient fault with tries left in the
// task's budget schedules a retry: the task waits queued (its run
// retry_scheduled) and the job is snoozed until then, so the budget, not
// the job, decides how often. Anything else ends the task as failed and
// returns nil: the job did its work, the work failed. An attempt that no
// longer holds its task (sql.ErrFenced) stops without writing anything.
// The usage since the last checkpoint is the loop's, if the run got that
// far; the change set discarded is the run's, if it has one.
func (r *taskRun) fail(ctx context.Context, cause error) error {
	task, log := r.task, r.log
	if errors.Is(cause, agentsql.ErrFenced) {
		log.WarnContext(ctx, "task was taken over, cancelled or finished elsewhere while running; dropping this attempt")
		return nil
	}
	var spend agentsql.Spend
	if r.lp != nil {
		spend = r.lp.unrecorded()
	}
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return r.stoppedFromOutside(ctx, cause, spend)
	}
	// Events queued before the failure come before its own events.
	if _, err := r.rec.Flush(context.WithoutCancel(ctx)); errors.Is(err, agentsql.ErrFenced) {
		log.WarnContext(ctx, "task was taken over, cancelled or finished elsewhere while failing; dropping this attempt")
		return fenceLost(ctx, task, cause)
	} else if err != nil {
		log.ErrorContext(ctx, "write queued events", slog.String("err", err.Error()))
	}
	if ctx.Err() != nil {
		// Shutdown, a lost lease or the job's timeout: the checkpoint and
		// the change set stay for the next attempt, which River or another
		// replica starts.
		return fmt.Errorf("run task %s: %w", task.ID, cause)
	}
	code, msg := classify(cause)
	msg = redact.String(msg) // it goes to the task's error, its run and an event
	transient := llm.IsTransient(cause) || isStorageTransient(cause)
	if transient && r.at.Number < r.at.MaxAttempts {
		return r.scheduleRetry(ctx, cause, code, msg, spend)
	}
	return r.endFailed(ctx, cause, code, msg, transient, spend)
}

// stoppedFromOutside ends an attempt whose task a control action cancelled
// (agentworker_control_task), which already moved the task, closed the run,
// discarded an open change set and wrote the terminal event: it keeps the
// usage spent since the last checkpoint and writes nothing else.
func (r *taskRun) stoppedFromOutside(ctx context.Context, cause error, spend agentsql.Spend) error {
	log := r.log
	if err := agentsql.AddRunUsage(context.WithoutCancel(ctx), r.runner.deps.Pool, r.at.fence(r.task), spend); errors.Is(err, agentsql.ErrFenced) {
		log.WarnContext(ctx, "usage of a stopped task not counted: the task was taken over, not cancelled")
	} else if err != nil {
		log.ErrorContext(ctx, "record usage of a stopped task", slog.String("err", err.Error()))
	}
	log.InfoContext(ctx, "task stopped from outside (a control action, or a takeover after its lease lapsed); dropping this attempt")
	return river.JobCancel(fmt.Errorf("task %s stopped from outside: %w", r.task.ID, cause))
}

// scheduleRetry queues the task again after the retry wait of its attempt,
// with the failure's events; the checkpoint and change set stay for the
// retry to continue from. The job is snoozed until then.
func (r *taskRun) scheduleRetry(ctx context.Context, cause error, code, msg string, spend agentsql.Spend) error {
	task, at := r.task, r.at
	wctx := context.WithoutCancel(ctx)
	wait := r.runner.retryWait(at.Number)
	err := r.rec.InTx(wctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		if _, err := r.rec.EmitIn(wctx, tx,
			events.Error{ErrorType: code, Message: msg, Recoverable: true},
			events.AgentPhase{Phase: events.PhaseRetrying, Status: string(agentsql.StatusQueued), Attempt: at.Number,
				Summary: fmt.Sprintf("attempt %d of %d failed; retrying in %s", at.Number, at.MaxAttempts, wait)}); err != nil {
			return err
		}
		return agentsql.ScheduleRetry(wctx, tx, at.fence(task), code, msg, wait, spend)
	})
	if errors.Is(err, agentsql.ErrFenced) {
		return fenceLost(ctx, task, cause)
	}
	if err != nil {
		// The database is unreachable: River retries the job, whose
		// claim finds the task still running under it.
		return fmt.Errorf("schedule retry of task %s (attempt %d, %s): %w", task.ID, at.Number, msg, err)
	}
	if r.lp != nil {
		r.lp.markRecorded()
	}
	r.log.WarnContext(ctx, "attempt failed; retry scheduled", slog.String("code", code), slog.Duration("wait", wait))
	return river.JobSnooze(wait)
}

// endFailed ends the task failed (blocked for an expectation mismatch):
// its change set discarded, then the terminal events and the task's move
// in one transaction. It returns nil once that is recorded.
func (r *taskRun) endFailed(ctx context.Context, cause error, code, msg string, transient bool, spend agentsql.Spend) error {
	task, at, log := r.task, r.at, r.log
	wctx := context.WithoutCancel(ctx)
	if r.cs != nil {
		// The task ends: its changes are not applied, the project stays as
		// it was. (A set already applying is kept.)
		if err := r.cs.Discard(wctx); errors.Is(err, agentsql.ErrFenced) {
			return fenceLost(ctx, task, cause)
		} else if err != nil {
			log.ErrorContext(ctx, "discard change set", slog.String("err", err.Error()))
		}
	}
	body, _ := json.Marshal(TaskError{Code: code, Message: msg, Recoverable: transient, Attempt: at.Number})
	status, phase := agentsql.StatusFailed, events.PhaseFailed
	if code == CodeExpectationMismatch {
		status, phase = agentsql.StatusBlocked, events.PhaseBlocked
	}
	var trec *events.Recorder
	err := pgx.BeginFunc(wctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		// The terminal event is the run's last: written before the task
		// leaves running, in the same transaction.
		trec = r.runner.recorder(tx, task, at)
		if _, err := trec.Emit(wctx, events.Error{ErrorType: code, Message: msg, Recoverable: false},
			events.AgentPhase{Phase: phase, Status: string(status), TaskType: string(task.Type), Summary: msg, TraceID: TraceID(task)}); err != nil {
			return err
		}
		_, err := agentsql.FinishTask(wctx, tx, at.fence(task), agentsql.Outcome{
			Status: status, RunStatus: "failed", Error: body, ErrorCode: code, ErrorMsg: msg,
			TokensIn: spend.TokensIn, TokensOut: spend.TokensOut, Cost: spend.Cost, RateWait: spend.RateWait, Model: r.model(),
		})
		return err
	})
	trec.Committed()
	if errors.Is(err, agentsql.ErrFenced) {
		return fenceLost(ctx, task, cause)
	}
	if err != nil {
		// The failure could not be recorded (database down): let River retry.
		return fmt.Errorf("record failure of task %s (%s): %w", task.ID, msg, err)
	}
	log.WarnContext(ctx, "task ended without success", slog.String("status", string(status)), slog.String("code", code), slog.String("error", msg))
	return nil
}

// fenceLost ends an attempt that found its task held by another attempt,
// cancelled or finished: it has nothing more to do. A control action's
// cancel is reported to River as such.
func fenceLost(ctx context.Context, task agentsql.Task, cause error) error {
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return river.JobCancel(fmt.Errorf("task %s stopped by a control action: %w", task.ID, cause))
	}
	return nil
}

// retryWait is the wait before the retry that follows the n-th try.
func (r *Runner) retryWait(n int) time.Duration {
	return min(r.cfg.RetryBackoff<<max(n-1, 0), time.Minute)
}

// TraceID is the trace a task's logs and events carry: the trace of the
// request that created it, else the trace_id the app put in the task's
// input, else the task id.
func TraceID(task agentsql.Task) string {
	if task.TraceID != "" {
		return task.TraceID
	}
	var in struct {
		TraceID string `json:"trace_id"`
	}
	if json.Unmarshal(task.Input, &in) == nil && traceid.Valid(in.TraceID) {
		return in.TraceID
	}
	return task.ID.String()
}

// RunKey names the task's current run: its task_runs idempotency key.
func RunKey(task agentsql.Task) string {
	return fmt.Sprintf("%s/%d", task.ID, task.Attempt)
}

func classify(err error) (code, msg string) {
	var te *taskError
	var term *TerminationError
	var api *llm.APIError
	var blocked *BlockedError
	var busy *llm.RateLimitError
	switch {
	case errors.As(err, &blocked):
		return CodeExpectationMismatch, blocked.Error()
	case errors.As(err, &te):
		return te.code, te.err.Error()
	case errors.As(err, &term):
		return term.Reason, term.Error()
	case errors.As(err, &busy):
		return CodeLLMRateLimited, err.Error()
	case errors.As(err, &api):
		if api.Transient {
			return CodeLLMTransient, api.Error()
		}
		return CodeLLMError, api.Error()
	case llm.IsTransient(err):
		return CodeLLMTransient, err.Error()
	case errors.Is(err, storage.ErrUnavailable):
		return CodeStorage, err.Error()
	}
	return CodeInternal, err.Error()
}

// isStorageTransient reports storage failures worth a retry: anything from
// the store that is not a caller mistake, and a store that stayed
// unreachable for as long as it retries, wherever the task met it (its
// context, a tool, a check, the apply).
func isStorageTransient(err error) bool {
	var te *taskError
	return errors.As(err, &te) && te.code == CodeStorage || errors.Is(err, storage.ErrUnavailable)
}

// entryChanges lists a change set's net changes; a move is one entry.
func entryChanges(entries []agentsql.ChangeEntry) []FileChange {
	moved := map[string]bool{}
	for _, e := range entries {
		if e.FromPath != "" {
			moved[e.FromPath] = true
		}
	}
	out := []FileChange{}
	for _, e := range entries {
		switch {
		case e.Op == agentsql.ChangeDelete && moved[e.Path]:
		case e.Op == agentsql.ChangeDelete:
			out = append(out, FileChange{Path: e.Path, Op: events.OpDelete})
		case e.FromPath != "":
			out = append(out, FileChange{Path: e.Path, Op: events.OpMove, FromPath: e.FromPath})
		case e.BaseETag == "":
			out = append(out, FileChange{Path: e.Path, Op: events.OpCreate})
		default:
			out = append(out, FileChange{Path: e.Path, Op: events.OpUpdate})
		}
	}
	return out
}

func fileChanges(updates []events.FileUpdate) []FileChange {
	out := []FileChange{}
	for _, u := range updates {
		out = append(out, FileChange{Path: u.Path, Op: u.Op, FromPath: u.FromPath})
	}
	return out
}
