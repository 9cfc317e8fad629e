package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Codes of a suspended run (task_runs.error_code of an interrupted run).
const (
	CodePaused        = "paused"
	CodeAwaitingInput = "awaiting_input"
	// CodeBudget prefixes the budget spent: budget_max_tokens, ...
	CodeBudget = "budget"
	// CodeInvalidInput: the task's input (budget, allowed_paths) is malformed.
	CodeInvalidInput = "invalid_input"
)

// Inbox reasons of the items a loop opens (inbox_items.reason).
const (
	ReasonQuestion = "question"
	ReasonBudget   = "budget"
	// AlertRepeat: the agent repeats the same actions.
	AlertRepeat = "stuck_repeat"
	// AlertErrors: most of the agent's recent tool calls failed.
	AlertErrors = "stuck_errors"
)

// Suspension stops a loop at an iteration boundary to wait for a person:
// a pause request or a spent budget (the task is paused until resumed), or
// a question (awaiting_input until answered). The loop's checkpoint keeps
// its place; the next attempt continues from it.
type Suspension struct {
	Status agentsql.Status // paused or awaiting_input
	Code   string          // the interrupted run's error_code
	// Reason, when set, opens an inbox item of that reason (budget, question).
	Reason  string
	Message string
}

func (s *Suspension) Error() string { return fmt.Sprintf("task %s: %s", s.Status, s.Message) }

func budgetSuspension(which, msg string) *Suspension {
	return &Suspension{Status: agentsql.StatusPaused, Code: CodeBudget + "_" + which, Reason: ReasonBudget,
		Message: msg + "; raise input.budget." + which + " and resume the task to go on"}
}

// Budget limits what one task may spend. A zero field is no limit.
type Budget struct {
	MaxTokens     int64   `json:"max_tokens"`
	MaxCostUSD    float64 `json:"max_cost_usd"`
	MaxIterations int     `json:"max_iterations"`
}

// taskPolicy is what a task's input sets beyond its prompt.
type taskPolicy struct {
	budget Budget
	scope  *storage.Scope
}

// policyOf reads input.budget (over the runner's defaults) and
// input.allowed_paths.
func (r *Runner) policyOf(task agentsql.Task) (taskPolicy, error) {
	var in struct {
		Budget       *Budget  `json:"budget"`
		AllowedPaths []string `json:"allowed_paths"`
	}
	p := taskPolicy{budget: Budget{MaxTokens: r.cfg.Budget.MaxTokens, MaxCostUSD: r.cfg.Budget.MaxCostUSD, MaxIterations: r.cfg.MaxIterations}}
	if len(task.Input) > 0 {
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input of task %s: %w", task.ID, err)}
		}
	}
	if b := in.Budget; b != nil {
		if b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.MaxIterations < 0 {
			return p, &taskError{CodeInvalidInput, fmt.Errorf("input.budget of task %s: limits must not be negative", task.ID)}
		}
		if b.MaxTokens > 0 {
			p.budget.MaxTokens = b.MaxTokens
		}
		if b.MaxCostUSD > 0 {
			p.budget.MaxCostUSD = b.MaxCostUSD
		}
		if b.MaxIterations > 0 {
			p.budget.MaxIterations = b.MaxIterations
		}
	}
	scope, err := storage.NewScope(in.AllowedPaths)
	if err != nil {
		return p, &taskError{CodeInvalidInput, fmt.Errorf("input.allowed_paths of task %s: %w", task.ID, err)}
	}
	p.scope = scope
	return p, nil
}

// pendingInput is a request_input call waiting for its answer.
type pendingInput struct {
	ToolCallID string `json:"toolCallId"`
	Question   string `json:"question"`
}

// loopState is the checkpointed state of a task's loop and build beyond
// its conversation.
type loopState struct {
	Iterations         int                 `json:"iterations"`
	Granted            int                 `json:"granted,omitempty"`
	Usage              llm.Usage           `json:"usage"`
	Cost               float64             `json:"cost"`
	Changes            []events.FileUpdate `json:"changes,omitempty"`
	History            []string            `json:"history,omitempty"`
	Writes             int                 `json:"writes,omitempty"`
	Summaries          map[string]string   `json:"summaries,omitempty"`
	Touched            []string            `json:"touched,omitempty"`
	Problems           []string            `json:"problems,omitempty"`
	Consecutive        int                 `json:"consecutive,omitempty"`
	Outcomes           []bool              `json:"outcomes,omitempty"`
	ToolChoiceFallback bool                `json:"toolChoiceFallback,omitempty"`
	Repairs            int                 `json:"repairs,omitempty"`
	Trigger            string              `json:"trigger,omitempty"`
	Pending            *pendingInput       `json:"pending,omitempty"`
}

func (b *taskRun) state() loopState {
	l := b.lp
	var touched []string
	for p := range l.touched {
		touched = append(touched, p)
	}
	sort.Strings(touched)
	return loopState{Iterations: l.iterations, Granted: l.granted, Usage: l.usage, Cost: l.cost, Changes: l.changes,
		History: l.history, Writes: l.writes, Summaries: l.summaries, Touched: touched, Problems: l.problems,
		Consecutive: l.consecutive, Outcomes: l.outcomes, ToolChoiceFallback: l.toolChoiceFallback,
		Repairs: b.repairs, Trigger: b.trigger, Pending: l.pending}
}

// restore puts the loop and build back where the checkpoint left them. The
// spend it holds was counted by the attempts that made it.
func (b *taskRun) restore(st loopState) {
	l := b.lp
	l.iterations, l.granted, l.usage, l.cost, l.changes = st.Iterations, st.Granted, st.Usage, st.Cost, st.Changes
	l.maxIterations = max(l.maxIterations, st.Granted)
	l.history, l.writes, l.summaries, l.problems = st.History, st.Writes, st.Summaries, st.Problems
	l.consecutive, l.outcomes, l.toolChoiceFallback, l.pending = st.Consecutive, st.Outcomes, st.ToolChoiceFallback, st.Pending
	l.touched = map[string]bool{}
	for _, p := range st.Touched {
		l.touched[p] = true
	}
	if l.summaries == nil {
		l.summaries = map[string]string{}
	}
	b.repairs, b.trigger = st.Repairs, st.Trigger
	l.markRecorded()
}

// checkpointRow encodes the conversation and state.
func (b *taskRun) checkpointRow(messages []llm.Message) (agentsql.Checkpoint, error) {
	msgs, err := json.Marshal(messages)
	if err != nil {
		return agentsql.Checkpoint{}, fmt.Errorf("encode conversation of task %s: %w", b.task.ID, err)
	}
	st, err := json.Marshal(b.state())
	if err != nil {
		return agentsql.Checkpoint{}, fmt.Errorf("encode loop state of task %s: %w", b.task.ID, err)
	}
	return agentsql.Checkpoint{TaskID: b.task.ID, Attempt: b.task.Attempt, Iteration: b.lp.iterations, Messages: msgs, State: st}, nil
}

// checkpoint saves the conversation after an iteration, with the
// iteration's queued events and its spend, in one transaction.
func (b *taskRun) checkpoint(ctx context.Context, messages []llm.Message) error {
	cp, err := b.checkpointRow(messages)
	if err != nil {
		return err
	}
	spend := b.lp.unrecorded()
	if err := pgx.BeginFunc(ctx, b.r.deps.Pool, func(tx pgx.Tx) error {
		if _, err := b.rec.EmitIn(ctx, tx); err != nil {
			return err
		}
		return agentsql.SaveCheckpoint(ctx, tx, b.at.JobID, cp, spend)
	}); err != nil {
		return err
	}
	b.lp.markRecorded()
	return nil
}

// beforeIteration stops the loop when a pause was requested.
func (b *taskRun) beforeIteration(ctx context.Context) error {
	requested, err := agentsql.PauseRequested(ctx, b.r.deps.Pool, b.task.ID)
	if err != nil {
		return err
	}
	if requested {
		return &Suspension{Status: agentsql.StatusPaused, Code: CodePaused, Message: "paused at an iteration boundary on request"}
	}
	return nil
}

// alert records a stuck alert: a warn log event with metadata.alert and one
// open inbox item per run and kind.
func (b *taskRun) alert(ctx context.Context, kind, detail string) error {
	return pgx.BeginFunc(ctx, b.r.deps.Pool, func(tx pgx.Tx) error {
		runID, err := agentsql.RunID(ctx, tx, b.task.ID, b.task.Attempt)
		if err != nil {
			return err
		}
		taskID := b.task.ID
		item, opened, err := agentsql.OpenInboxItem(ctx, tx, agentsql.InboxItem{ProjectID: b.task.ProjectID, TaskID: &taskID, RunID: &runID,
			Kind: agentsql.InboxAwaitUserInput, Reason: kind, Title: "Task looks stuck", Content: clip(detail, 2000)})
		if err != nil || !opened {
			return err
		}
		_, err = b.rec.EmitIn(ctx, tx, events.Log{Level: events.LevelWarn, Message: "alert: " + clip(detail, 300),
			Metadata: map[string]any{"alert": kind, "inboxItemId": item.ID.String(), "runId": runID.String()}})
		return err
	})
}

// resumeFrom continues a conversation from the task's checkpoint: a pending
// question gets its answer as the tool result.
func (b *taskRun) resumeFrom(ctx context.Context, cp agentsql.Checkpoint) ([]llm.Message, error) {
	var messages []llm.Message
	var st loopState
	if err := json.Unmarshal(cp.Messages, &messages); err != nil {
		return nil, &taskError{CodeInternal, fmt.Errorf("decode checkpoint of task %s: %w", b.task.ID, err)}
	}
	if err := json.Unmarshal(cp.State, &st); err != nil {
		return nil, &taskError{CodeInternal, fmt.Errorf("decode checkpoint state of task %s: %w", b.task.ID, err)}
	}
	b.restore(st)
	note := fmt.Sprintf("resumed from the checkpoint of iteration %d (attempt %d): %d messages, %d model calls not repeated",
		cp.Iteration, cp.Attempt, len(messages), cp.Iteration)
	if p := b.lp.pending; p != nil {
		answer, ok, err := agentsql.LastAnswer(ctx, b.r.deps.Pool, b.task.ID)
		if err != nil {
			return nil, err
		}
		body := map[string]any{"success": true, "question": p.Question, "answer": answer}
		if !ok {
			body = map[string]any{"success": false, "question": p.Question, "error": "the question was not answered"}
		}
		out, _ := json.Marshal(body)
		messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: p.ToolCallID, Content: string(out)})
		b.lp.pending = nil
		note += "; the user's answer is the result of request_input"
	}
	b.rec.Add(events.Log{Level: events.LevelInfo, Message: note,
		Metadata: map[string]any{"checkpointIteration": cp.Iteration, "checkpointAttempt": cp.Attempt, "messages": len(messages)}})
	return messages, nil
}

// suspend ends the attempt at an iteration boundary: checkpoint, inbox
// item, task paused or awaiting_input, run interrupted — one transaction.
// The job completes; resume or answer enqueues the next attempt.
func (r *Runner) suspend(ctx context.Context, log *slog.Logger, b *taskRun, messages []llm.Message, s *Suspension) error {
	wctx := context.WithoutCancel(ctx)
	cp, err := b.checkpointRow(messages)
	if err != nil {
		return r.fail(ctx, b.rec, log, b.task, b.at, b.lp, b.cs, err)
	}
	spend := b.lp.unrecorded()
	phase := events.PhasePaused
	if s.Status == agentsql.StatusAwaitingInput {
		phase = events.PhaseAwaitingInput
	}
	err = pgx.BeginFunc(wctx, r.deps.Pool, func(tx pgx.Tx) error {
		if _, err := b.rec.EmitIn(wctx, tx); err != nil {
			return err
		}
		if err := agentsql.SaveCheckpoint(wctx, tx, b.at.JobID, cp, agentsql.Spend{}); err != nil {
			return err
		}
		meta := map[string]any{"code": s.Code}
		if s.Reason != "" {
			runID, err := agentsql.RunID(wctx, tx, b.task.ID, b.task.Attempt)
			if err != nil {
				return err
			}
			taskID := b.task.ID
			title := "The agent asks a question"
			if s.Reason == ReasonBudget {
				title = "Task paused: budget spent"
			}
			item, _, err := agentsql.OpenInboxItem(wctx, tx, agentsql.InboxItem{ProjectID: b.task.ProjectID, TaskID: &taskID, RunID: &runID,
				Kind: agentsql.InboxAwaitUserInput, Reason: s.Reason, Title: title, Content: s.Message})
			if err != nil {
				return err
			}
			if item.ID != uuid.Nil {
				meta["inboxItemId"] = item.ID.String()
			}
		}
		if _, err := agentsql.FinishTask(wctx, tx, b.task.ID, b.at.JobID, agentsql.Outcome{
			Status: s.Status, RunStatus: string(agentsql.RunInterrupted), ErrorCode: s.Code, ErrorMsg: clip(s.Message, 1000),
			TokensIn: spend.TokensIn, TokensOut: spend.TokensOut, Cost: spend.Cost, Model: r.deps.LLM.Model(),
		}); err != nil {
			return err
		}
		_, err := b.rec.EmitIn(wctx, tx, events.AgentPhase{Phase: phase, Status: string(s.Status), TaskType: string(b.task.Type), Summary: s.Message},
			events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("%s after iteration %d: %s", s.Status, b.lp.iterations, s.Message), Metadata: meta})
		return err
	})
	if errors.Is(err, agentsql.ErrNotClaimed) {
		log.WarnContext(ctx, "task was taken over or cancelled while suspending; dropping this attempt")
		return nil
	}
	if err != nil {
		return fmt.Errorf("suspend task %s (%s): %w", b.task.ID, s.Status, err)
	}
	b.lp.markRecorded()
	log.InfoContext(ctx, "task suspended", slog.String("status", string(s.Status)), slog.String("code", s.Code), slog.Int("iterations", b.lp.iterations))
	return nil
}
