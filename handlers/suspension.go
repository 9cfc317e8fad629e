package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Codes of a suspended run (task_runs.error_code of an interrupted run).
const (
	CodePaused        = "paused"
	CodeAwaitingInput = "awaiting_input"
	// CodeBudget prefixes the budget spent: budget_max_tokens, ...
	CodeBudget = "budget"
	// CodeDayCap: the project's daily cost cap is reached.
	CodeDayCap = "budget_project_day"
	// CodeInvalidInput: the task's input (budget, allowed_paths) is malformed.
	CodeInvalidInput = "invalid_input"
)

// Inbox reasons of the items a loop opens (inbox_items.reason).
const (
	ReasonQuestion = "question"
	ReasonBudget   = "budget"
	// ReasonBudgetExceeded: the project's daily cost cap is reached; the
	// task resumes when the cap is raised or the UTC day turns.
	ReasonBudgetExceeded = "budget_exceeded"
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
	Status agentsql.Status // paused, awaiting_input or awaiting_approval
	Code   string          // the interrupted run's error_code
	// Reason, when set, opens an inbox item of that reason (budget, question).
	Reason  string
	Message string
}

func (s *Suspension) Error() string { return fmt.Sprintf("task %s: %s", s.Status, s.Message) }

// budgetSuspension pauses a task whose budget is spent. atCeiling says the
// budget is the operator's ceiling, which input.budget cannot raise.
func budgetSuspension(which, msg string, atCeiling bool) *Suspension {
	hint := "; raise input.budget." + which + " and resume the task to go on"
	if atCeiling {
		hint = "; that is the operator's ceiling, which input.budget cannot raise"
	}
	return &Suspension{Status: agentsql.StatusPaused, Code: CodeBudget + "_" + which, Reason: ReasonBudget,
		Message: msg + hint}
}

// beforeIteration stops the loop when a pause was requested, or when the
// project's daily cost cap is reached (underDayCap). The claim (for
// the first iteration) or the checkpoint that ended the previous iteration
// read the request already; otherwise (a plan step, an attempt not started
// by a claim) it is read here.
func (r *taskRun) beforeIteration(ctx context.Context) error {
	var requested bool
	if r.pauseRead != nil {
		requested, r.pauseRead = *r.pauseRead, nil
	} else {
		var err error
		if requested, err = agentsql.PauseRequested(ctx, r.runner.deps.Pool, r.task.ID); err != nil {
			return err
		}
	}
	if requested {
		return &Suspension{Status: agentsql.StatusPaused, Code: CodePaused, Message: "paused at an iteration boundary on request"}
	}
	return r.underDayCap(ctx)
}

// alert records a stuck alert: a warn log event with metadata.alert and one
// open inbox item per run and kind.
func (r *taskRun) alert(ctx context.Context, kind, detail string) error {
	return r.rec.InTx(ctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		runID, err := agentsql.RunID(ctx, tx, r.task.ID, r.task.Attempt)
		if err != nil {
			return err
		}
		taskID := r.task.ID
		item, opened, err := agentsql.OpenInboxItem(ctx, tx, agentsql.InboxItem{ProjectID: r.task.ProjectID, TaskID: &taskID, RunID: &runID,
			Kind: agentsql.InboxAwaitUserInput, Reason: kind, Title: "Task looks stuck", Content: clip(detail, 2000)})
		if err != nil || !opened {
			return err
		}
		_, err = r.rec.EmitIn(ctx, tx, events.Log{Level: events.LevelWarn, Message: "alert: " + clip(detail, 300),
			Metadata: map[string]any{"alert": kind, "inboxItemId": item.ID.String(), "runId": runID.String()}})
		return err
	})
}

// resumeFrom continues a conversation from the task's checkpoint: a pending
// question gets its answer as the tool result.

// suspend ends the attempt at an iteration boundary: checkpoint, inbox
// item, task paused or awaiting_input, run interrupted — one transaction.
// The job completes; resume or answer enqueues the next attempt.
func (r *taskRun) suspend(ctx context.Context, messages []llm.Message, s *Suspension) error {
	wctx := context.WithoutCancel(ctx)
	cp, err := r.checkpointRow(messages)
	if err != nil {
		return r.fail(ctx, err)
	}
	spend := r.lp.unrecorded()
	phase := events.PhasePaused
	switch s.Status {
	case agentsql.StatusAwaitingInput:
		phase = events.PhaseAwaitingInput
	case agentsql.StatusAwaitingApproval:
		phase = events.PhaseAwaitingApproval
	}
	err = r.rec.InTx(wctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		if _, err := r.rec.EmitIn(wctx, tx); err != nil {
			return err
		}
		if _, err := agentsql.SaveCheckpoint(wctx, tx, r.at.fence(r.task), cp, agentsql.Spend{}); err != nil {
			return err
		}
		meta := map[string]any{"code": s.Code}
		if s.Status == agentsql.StatusAwaitingApproval {
			if err := r.requestApprovals(wctx, tx); err != nil {
				return err
			}
		}
		if s.Reason != "" {
			runID, err := agentsql.RunID(wctx, tx, r.task.ID, r.task.Attempt)
			if err != nil {
				return err
			}
			taskID := r.task.ID
			title := "The agent asks a question"
			switch s.Reason {
			case ReasonBudget:
				title = "Task paused: budget spent"
			case ReasonBudgetExceeded:
				title = "Task paused: the project's daily cost cap is reached"
			case ReasonToolApproval:
				title = "Tool calls wait for approval"
			}
			item, _, err := agentsql.OpenInboxItem(wctx, tx, agentsql.InboxItem{ProjectID: r.task.ProjectID, TaskID: &taskID, RunID: &runID,
				Kind: agentsql.InboxAwaitUserInput, Reason: s.Reason, Title: title, Content: s.Message})
			if err != nil {
				return err
			}
			if item.ID != uuid.Nil {
				meta["inboxItemId"] = item.ID.String()
			}
		}
		// The run's last event is its terminal one, written before the
		// task leaves running (the fence refuses writes after).
		if _, err := r.rec.EmitIn(wctx, tx,
			events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("%s after iteration %d: %s", s.Status, r.lp.iterations, s.Message), Metadata: meta},
			events.AgentPhase{Phase: phase, Status: string(s.Status), TaskType: string(r.task.Type), Summary: s.Message}); err != nil {
			return err
		}
		_, err := agentsql.FinishTask(wctx, tx, r.at.fence(r.task), agentsql.Outcome{
			Status: s.Status, RunStatus: string(agentsql.RunInterrupted), ErrorCode: s.Code, ErrorMsg: clip(s.Message, 1000),
			TokensIn: spend.TokensIn, TokensOut: spend.TokensOut, Cost: spend.Cost, RateWait: spend.RateWait, Model: r.model(),
		})
		return err
	})
	if errors.Is(err, agentsql.ErrFenced) {
		r.log.WarnContext(ctx, "task was taken over or cancelled while suspending; dropping this attempt")
		return nil
	}
	if err != nil {
		return fmt.Errorf("suspend task %s (%s): %w", r.task.ID, s.Status, err)
	}
	r.lp.markRecorded()
	r.log.InfoContext(ctx, "task suspended", slog.String("status", string(s.Status)), slog.String("code", s.Code), slog.Int("iterations", r.lp.iterations))
	return nil
}
