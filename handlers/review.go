package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools/patch"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
)

// finishReview ends a build that asked for review: its change set stays
// staged, its conversation is checkpointed (a reject with feedback goes
// on from there), the run is finished and the task is in review — one
// transaction.
func (r *taskRun) finishReview(ctx context.Context, res Result, messages []llm.Message) error {
	wctx := context.WithoutCancel(ctx)
	entries, err := r.cs.Entries(wctx)
	if err != nil {
		return err
	}
	res.FilesChanged = entryChanges(entries)
	body, err := json.Marshal(res)
	if err != nil {
		return &taskError{CodeInternal, fmt.Errorf("encode result of task %s: %w", r.task.ID, err)}
	}
	cp, err := r.checkpointRow(messages)
	if err != nil {
		return err
	}
	spend := r.lp.unrecorded()
	err = r.rec.InTx(wctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		if _, err := r.rec.EmitIn(wctx, tx); err != nil {
			return err
		}
		if _, err := agentsql.SaveCheckpoint(wctx, tx, r.at.fence(r.task), cp, agentsql.Spend{}); err != nil {
			return err
		}
		if _, err := r.rec.EmitIn(wctx, tx,
			events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("change set staged for review: %d file change(s)", len(entries)),
				Metadata: map[string]any{"staged": len(entries)}},
			events.AgentPhase{Phase: events.PhaseReview, Status: string(agentsql.StatusReview), TaskType: string(r.task.Type),
				Model: res.Model, Summary: res.Summary}); err != nil {
			return err
		}
		_, err := agentsql.FinishTask(wctx, tx, r.at.fence(r.task), agentsql.Outcome{
			Status: agentsql.StatusReview, RunStatus: string(agentsql.RunSucceeded), Result: body,
			TokensIn: spend.TokensIn, TokensOut: spend.TokensOut, Cost: spend.Cost, RateWait: spend.RateWait, Model: res.Model,
		})
		return err
	})
	if err != nil {
		return err
	}
	r.lp.markRecorded()
	return nil
}

// applyApproved applies the change set of a task approved in review, as a
// build that succeeds does, under this attempt's fence. A file changed in
// storage since the build read it leaves the set as it was and sends the
// task back to review with the conflict.
func (r *taskRun) applyApproved(ctx context.Context, cs *changeset.Set) error {
	r.cs = cs
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	applied, err := cs.Apply(actx, r.task.Result)
	if errors.Is(err, storage.ErrConflict) {
		status, _, serr := agentsql.ChangeSetState(actx, r.runner.deps.Pool, r.task.ID)
		if serr == nil && status == agentsql.ChangeSetOpen {
			return r.backToReview(actx, err)
		}
		return r.fail(ctx, &taskError{CodeConflict, err})
	}
	if err != nil {
		return r.fail(ctx, &taskError{CodeStorage, err})
	}
	var res Result
	_ = json.Unmarshal(r.task.Result, &res)
	// The usage was counted by the attempts that made the changes.
	if err := r.finishSucceeded(actx, r.task.Result, agentsql.Spend{}, res.Model, res.Summary, len(applied), true); err != nil {
		return r.fail(ctx, err)
	}
	r.log.InfoContext(ctx, "approved change set applied", slog.Int("files", len(applied)))
	r.reindexAfterApply(actx, applied)
	return nil
}

// backToReview ends an approved attempt whose apply found a conflict
// before writing anything: the task is in review again, its set staged.
func (r *taskRun) backToReview(ctx context.Context, cause error) error {
	msg := clip(cause.Error(), 1000)
	terr, _ := json.Marshal(TaskError{Code: CodeConflict, Message: msg, Recoverable: true, Attempt: r.at.Number})
	err := r.rec.InTx(ctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		if _, err := r.rec.EmitIn(ctx, tx,
			events.Log{Level: events.LevelWarn, Message: "approved change set not applied: " + msg, Metadata: map[string]any{"code": CodeConflict}},
			events.AgentPhase{Phase: events.PhaseReview, Status: string(agentsql.StatusReview), TaskType: string(r.task.Type), Summary: msg}); err != nil {
			return err
		}
		_, err := agentsql.FinishTask(ctx, tx, r.at.fence(r.task), agentsql.Outcome{
			Status: agentsql.StatusReview, RunStatus: string(agentsql.RunFailed), Error: terr, ErrorCode: CodeConflict, ErrorMsg: msg,
		})
		return err
	})
	if errors.Is(err, agentsql.ErrFenced) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("return task %s to review: %w", r.task.ID, err)
	}
	r.log.WarnContext(ctx, "approved change set conflicts with storage; task back in review", slog.String("error", msg))
	return nil
}

// withFeedback gives the model, as the next user message, the comments made
// on the task since its conversation was checkpointed (a reviewer's
// feedback on its revision, each comment with its file and line), and the
// files that changed in storage since the build read them: their staged
// changes are dropped, so that the revision is made on their current
// version and the next approve does not conflict again.
func (r *taskRun) withFeedback(ctx context.Context, messages []llm.Message, since time.Time) ([]llm.Message, error) {
	comments, err := agentsql.TaskCommentsSince(ctx, r.runner.deps.Pool, r.task.ID, since)
	if err != nil {
		return messages, err
	}
	dropped, err := r.cs.DropConflicts(ctx)
	if err != nil {
		return messages, err
	}
	if len(comments) == 0 && len(dropped) == 0 {
		return messages, nil
	}
	var b strings.Builder
	if len(comments) > 0 {
		b.WriteString("A reviewer rejected your changes, which are not applied yet. Revise them as the review asks, then finish again.\n\nReview comments:\n")
		for _, c := range comments {
			b.WriteString("- ")
			if c.Path != "" {
				b.WriteString(c.Path)
				if c.Line != nil {
					fmt.Fprintf(&b, ":%d", *c.Line)
				}
				b.WriteString(": ")
			}
			b.WriteString(c.Body)
			b.WriteString("\n")
		}
		r.rec.Add(events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("revising after review: %d comment(s) given to the model", len(comments)),
			Metadata: map[string]any{"comments": len(comments)}})
	}
	if len(dropped) > 0 {
		writeDropped(&b, dropped)
		paths := make([]string, len(dropped))
		for i, d := range dropped {
			paths[i] = d.Staged.Path
		}
		r.rec.Add(events.Log{Level: events.LevelWarn, Message: "changed in storage since the build read them; their staged changes were dropped for the revision: " + strings.Join(paths, ", "),
			Metadata: map[string]any{"dropped": paths}})
	}
	return append(messages, llm.Message{Role: llm.RoleUser, Content: b.String()}), nil
}

// maxDroppedDiff bounds each dropped change's diff in the model's message.
const maxDroppedDiff = 8 << 10

// writeDropped tells the model which staged changes were dropped, each as
// the diff from the file's current content to what the build had staged.
func writeDropped(b *strings.Builder, dropped []changeset.Dropped) {
	b.WriteString("\nThese files changed in storage since you read them, so your staged changes to them were dropped and the files are as storage holds them now. Read them again and make your change on their current version. What you had staged, as a diff from their current content:\n")
	for _, d := range dropped {
		e := d.Staged
		if e.Void() && !d.Exists {
			continue
		}
		after := ""
		if e.Op == agentsql.ChangeWrite {
			after = string(e.Content)
		}
		diff := patch.Unified(e.Path, e.Path, string(d.Current), after, !d.Exists, e.Op == agentsql.ChangeDelete)
		fmt.Fprintf(b, "\n%s\n", clip(diff, maxDroppedDiff))
	}
}
