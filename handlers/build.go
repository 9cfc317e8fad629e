package handlers

import (
	"context"
	"errors"
	"fmt"
	"github.com/google/uuid"
	"log/slog"
	"sort"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/sandbox"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
)

// ReasonStaticChecks ends a build loop whose model stopped while the static
// checks of its changes fail. Like oscillation it is repairable.
const ReasonStaticChecks = "static_checks"

// taskRun is the state of one run of a task of any type beyond the loop:
// its change set, the plan it follows, the checks and repairs.
type taskRun struct {
	// review: the build ends in review instead of applying (input.review).
	review bool
	// rules are the project's rules files and what of them the model has had.
	rules *projectRules
	// context is what the system prompt is given beyond the file summary
	// and the rules: the tasks view, the documents, the dependencies.
	context taskContext
	runner  *Runner
	task    agentsql.Task
	at      Attempt
	rec     *events.Recorder
	log     *slog.Logger
	store   storage.Store  // the change set for builds, else the project store
	cs      *changeset.Set // nil for chat and plan tasks; set once reset or rewound
	lp      *loop          // nil until the loop is built
	plan    *Plan
	// agent is the agent the task runs as, if any; expand the project's
	// agents by name when the task is a plan that creates tasks (nil
	// otherwise), and children the tasks it planned.
	agent    *agentsql.Agent
	expand   map[string]uuid.UUID
	children []agentsql.PlannedTask
	// checks is the last static check report; repairs the self-repair
	// attempts made.
	checks  *verify.Report
	repairs int
	trigger string // the reason of the current repair attempt
	// ws is the build's sandbox workspace (nil when commands are off);
	// baseWS and baseRuns the project as it was, for failing checks.
	ws, baseWS *sandbox.Workspace
	baseRuns   map[string]sandbox.Outcome
	// pauseRead is the pause request the last checkpoint read, for the
	// iteration boundary right after it; nil: read it there.
	pauseRead *bool
	// dayCapRead is the project's cap and day spend the claim read, for
	// the first iteration boundary; nil: read them there.
	dayCapRead *agentsql.DayCap
	// cappedRead is whether the project had a cap of its own when the
	// last checkpoint was saved, for the iteration boundary right after
	// it; nil: not known.
	cappedRead *bool
}

// check runs the static checks over the files the change set writes (and
// those importing what it deletes), in the project as it was and as the
// change set leaves it: only problems the build introduced fail them.
func (r *taskRun) check(ctx context.Context) (verify.Report, error) {
	entries, err := r.cs.Entries(ctx)
	if err != nil {
		return verify.Report{}, err
	}
	var changed []verify.Change
	var removed []string
	for _, e := range entries {
		switch e.Op {
		case agentsql.ChangeWrite:
			changed = append(changed, verify.Change{Path: e.Path, From: e.FromPath})
		case agentsql.ChangeDelete:
			removed = append(removed, e.Path)
		}
	}
	rep, err := verify.CheckChange(ctx, r.runner.deps.Store, r.cs, r.task.ProjectID.String(), changed, removed)
	if err != nil {
		return rep, err
	}
	r.checks = &rep
	level := events.LevelInfo
	if !rep.Passed() {
		level = events.LevelWarn
	}
	// Queued: the finish's round trip writes it, or, when the checks
	// refuse the finish, the next LLM call's.
	r.rec.Add(events.Log{Level: level, Message: "static checks: " + firstLine(rep.String()),
		Metadata: map[string]any{"checked": rep.Checked, "problems": rep.Problems, "preexisting": rep.Preexisting, "unchecked": rep.Unchecked}})
	return rep, nil
}

// checkBeforeFinish is the loop's finish gate: a failing static check, then
// a failing project check, refuses the finish with the problems, which puts
// the model in the FIX state.
func (r *taskRun) checkBeforeFinish(ctx context.Context) (string, error) {
	rep, err := r.check(ctx)
	if err != nil {
		return "", err
	}
	if !rep.Passed() {
		return rep.String() + "Fix these problems (read the files, then edit them), then call finish again.", nil
	}
	return r.projectChecks(ctx)
}

// repairLoop runs the loop, and when the model gets stuck (failed calls,
// oscillation, failing checks) gives it up to MaxRepairAttempts fresh
// starts with a repair message, each recorded as self_repair events.
func (r *taskRun) repairLoop(ctx context.Context, messages []llm.Message) (string, []llm.Message, error) {
	maxAttempts := r.runner.cfg.MaxRepairAttempts
	for {
		final, out, err := r.lp.run(ctx, messages)
		messages = out
		if err == nil && r.cs != nil && !r.lp.finishChecked {
			// The model stopped without a checked finish: check now.
			rep, cerr := r.check(ctx)
			if cerr != nil {
				return "", messages, cerr
			}
			refusal := ""
			if !rep.Passed() {
				refusal = rep.String()
			} else if refusal, cerr = r.projectChecks(ctx); cerr != nil {
				return "", messages, cerr
			}
			if refusal != "" {
				err = &TerminationError{Reason: ReasonStaticChecks, Detail: refusal}
			}
		}
		if err == nil {
			if r.repairs > 0 {
				if _, err := r.rec.Emit(ctx, events.SelfRepair{AttemptNumber: r.repairs, MaxAttempts: maxAttempts,
					Trigger: r.trigger, Result: "success"}); err != nil {
					return "", messages, err
				}
			}
			return final, messages, nil
		}
		var term *TerminationError
		if errors.As(err, new(*Suspension)) {
			return "", messages, err
		}
		if !errors.As(err, &term) || !(term.repairable() || term.Reason == ReasonStaticChecks) || ctx.Err() != nil {
			return "", messages, r.repairFailed(ctx, err)
		}
		if r.repairs > 0 {
			if _, err := r.rec.Emit(ctx, events.SelfRepair{AttemptNumber: r.repairs, MaxAttempts: maxAttempts,
				Trigger: term.Reason, ErrorType: term.Reason, ErrorMessage: term.Detail, Result: "failed"}); err != nil {
				return "", messages, err
			}
		}
		if r.repairs >= maxAttempts {
			return "", messages, err
		}
		r.repairs++
		r.trigger = term.Reason
		msg, rerr := r.runner.prompts.RepairMessage(prompts.Repair{Attempt: r.repairs, MaxAttempts: maxAttempts,
			Trigger: term.Reason, Error: term.Detail, Touched: r.touched(), FailedCalls: r.lp.failures})
		if rerr != nil {
			return "", messages, &taskError{CodeInternal, rerr}
		}
		if _, err := r.rec.Emit(ctx,
			events.Error{ErrorType: term.Reason, Message: term.Error(), Recoverable: true},
			events.SelfRepair{AttemptNumber: r.repairs, MaxAttempts: maxAttempts, Trigger: term.Reason,
				ErrorType: term.Reason, ErrorMessage: term.Detail, Suggestion: "diagnose, then make the smallest fix", Result: "pending"},
			events.AgentPhase{Phase: events.PhaseDebugger, Action: "enter", Attempt: r.repairs},
		); err != nil {
			return "", messages, err
		}
		messages = append(messages, llm.Message{Role: llm.RoleUser, Content: msg})
		r.pauseRead, r.dayCapRead, r.cappedRead = nil, nil, nil // checks may have run since the last checkpoint or the claim read them
		r.lp.grant(r.runner.cfg.RepairBudget)
		if r.lp.after != nil {
			// The repair message belongs to the conversation a later attempt continues.
			if err := r.lp.after(ctx, messages); err != nil {
				return "", messages, err
			}
		}
	}
}

// repairFailed closes a pending repair attempt before a final error.
func (r *taskRun) repairFailed(ctx context.Context, err error) error {
	if r.repairs == 0 || ctx.Err() != nil {
		return err
	}
	var term *TerminationError
	reason := "error"
	if errors.As(err, &term) {
		reason = term.Reason
	}
	if _, eerr := r.rec.Emit(ctx, events.SelfRepair{AttemptNumber: r.repairs, MaxAttempts: r.runner.cfg.MaxRepairAttempts,
		Trigger: reason, ErrorType: reason, ErrorMessage: err.Error(), Result: "failed"}); eerr != nil {
		return eerr
	}
	return err
}

func (r *taskRun) touched() []string {
	var out []string
	for p := range r.lp.touched {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// BlockedError stops a plan-driven build whose step did not meet its
// expectation. The task moves to blocked: a person must look.
type BlockedError struct {
	DecisionID string
	Reason     string
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("decision %s did not meet its expectation: %s", e.DecisionID, e.Reason)
}
