package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
)

// CodeAwaitingApproval is the error_code of a run interrupted because tool
// calls asked; ReasonToolApproval the reason of its inbox item.
const (
	CodeAwaitingApproval = "awaiting_approval"
	ReasonToolApproval   = "tool_approval"
)

// askedCall is a call of the last model turn that waits for a person.
type askedCall struct {
	ToolCallID string `json:"toolCallId"`
	Name       string `json:"name"`
	Arguments  string `json:"arguments"`
	Reason     string `json:"reason,omitempty"`
}

// decide is the task's tool policies' decision for a call: the strictest
// of them. A call a person approved is allowed, and so are the control
// tools, which steer the loop, never the project. Where the loop cannot
// wait for a person (noAsk), an ask is a deny with that reason.
func (l *loop) decide(call llm.ToolCall) tools.Decision {
	d := tools.Decision{Action: tools.PolicyAllow}
	if l.approved[call.ID] || tools.LoopControl(call.Name) {
		return d
	}
	for _, p := range l.policies {
		d = tools.Stricter(d, p.Decide(call.Name, call.Arguments))
	}
	if d.Action == tools.PolicyAsk && l.noAsk != "" {
		d = tools.Decision{Action: tools.PolicyDeny, Reason: strings.TrimSpace(d.Reason + " (" + l.noAsk + ")")}
	}
	return d
}

// denied answers a call the policy denies with the rule's reason, as a
// failed result the model can act on, without running it.
func (l *loop) denied(call llm.ToolCall) (tools.Result, bool) {
	d := l.decide(call)
	if d.Action != tools.PolicyDeny {
		return tools.Result{}, false
	}
	msg := fmt.Sprintf("not run: the tool policy denies this %s call", call.Name)
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	return tools.Fail(msg, "do not call it again this way; take another approach, or finish and say what you could not do"), true
}

// askFor suspends the loop on the calls that asked: they are recorded,
// with their arguments, when the task moves to awaiting_approval.
func (l *loop) askFor(calls []llm.ToolCall) *Suspension {
	l.asked = l.asked[:0]
	names := make([]string, 0, len(calls))
	for _, c := range calls {
		l.asked = append(l.asked, askedCall{ToolCallID: c.ID, Name: c.Name, Arguments: c.Arguments, Reason: l.decide(c).Reason})
		names = append(names, c.Name)
	}
	return &Suspension{Status: agentsql.StatusAwaitingApproval, Code: CodeAwaitingApproval, Reason: ReasonToolApproval,
		Message: fmt.Sprintf("%d tool call(s) wait for approval: %s", len(calls), strings.Join(names, ", "))}
}

// requestApprovals records the calls that asked and their events, in the
// suspending transaction.
func (r *taskRun) requestApprovals(ctx context.Context, tx pgx.Tx) error {
	runID, err := agentsql.RunID(ctx, tx, r.task.ID, r.task.Attempt)
	if err != nil {
		return err
	}
	calls := make([]agentsql.ToolApproval, len(r.lp.asked))
	payloads := make([]events.Payload, len(r.lp.asked))
	for i, c := range r.lp.asked {
		calls[i] = agentsql.ToolApproval{ToolCallID: c.ToolCallID, ToolName: c.Name, Arguments: c.Arguments, Reason: c.Reason}
		payloads[i] = events.ToolApprovalRequested{ToolCallID: c.ToolCallID, ToolName: c.Name, Arguments: clip(c.Arguments, 4000), Reason: c.Reason}
	}
	if err := agentsql.RequestToolApprovals(ctx, tx, r.at.fence(r.task), r.task.ProjectID, runID, calls); err != nil {
		return err
	}
	_, err = r.rec.EmitIn(ctx, tx, payloads...)
	return err
}

// answerAsked gives the model the answers to the calls that asked, when
// the task goes on: an approved call runs now and its output is its
// result, a denied one's result is the person's message. The outputs are
// recorded with a checkpoint of the conversation holding them, in one
// transaction, so an approved call runs exactly once: an attempt that
// dies before that commit leaves the change set at the earlier checkpoint
// (the next attempt rewinds to it) and the call unrecorded, to be run by
// the next attempt as if for the first time.
func (r *taskRun) answerAsked(ctx context.Context, messages []llm.Message) ([]llm.Message, error) {
	l := r.lp
	approvals, err := agentsql.ToolApprovals(ctx, r.runner.deps.Pool, r.task.ID)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]agentsql.ToolApproval, len(approvals))
	for _, a := range approvals {
		byID[a.ToolCallID] = a
	}
	type ran struct{ id, output string }
	var outputs []ran
	for _, c := range l.asked {
		call := llm.ToolCall{ID: c.ToolCallID, Name: c.Name, Arguments: c.Arguments}
		a, ok := byID[c.ToolCallID]
		var content string
		switch {
		case ok && a.Status == agentsql.ApprovalApproved && a.Output != nil:
			content = *a.Output
		case ok && a.Status == agentsql.ApprovalApproved:
			if l.approved == nil {
				l.approved = map[string]bool{}
			}
			l.approved[c.ToolCallID] = true
			res, err := l.callTool(ctx, call)
			delete(l.approved, c.ToolCallID)
			if err != nil {
				return nil, err
			}
			content = res.Output
			l.account(call, res)
			outputs = append(outputs, ran{c.ToolCallID, content})
		default:
			why := "not run: a person denied this call"
			if ok && a.Status != agentsql.ApprovalDenied {
				why = "not run: the call was not approved"
			}
			body := map[string]any{"success": false, "error": why, "hint": "do not call it again this way; take another approach"}
			if ok && a.Message != nil {
				body["message"] = *a.Message
				body["error"] = why + ": " + *a.Message
			}
			out, _ := json.Marshal(body)
			content = string(out)
			l.account(call, tools.Result{Output: content, Summary: why})
		}
		messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: c.ToolCallID, Content: content})
	}
	l.asked = nil
	cp, err := r.checkpointRow(messages)
	if err != nil {
		return nil, err
	}
	spend := l.unrecorded()
	err = r.rec.InTx(ctx, r.runner.deps.Pool, func(tx pgx.Tx) error {
		if _, err := r.rec.EmitIn(ctx, tx); err != nil {
			return err
		}
		if _, err := agentsql.SaveCheckpoint(ctx, tx, r.at.fence(r.task), cp, spend); err != nil {
			return err
		}
		for _, o := range outputs {
			if err := agentsql.RecordToolOutput(ctx, tx, r.at.fence(r.task), o.id, o.output); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record the answered tool calls of task %s: %w", r.task.ID, err)
	}
	l.markRecorded()
	return messages, nil
}
