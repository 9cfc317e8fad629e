package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
)

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
	// Asked are the calls of the last turn that wait for approval.
	Asked []askedCall `json:"asked,omitempty"`
	// RulesGiven are the folders whose rules the model has had ("" the
	// root's), RulesBytes the rules bytes given.
	RulesGiven []string `json:"rulesGiven,omitempty"`
	RulesBytes int      `json:"rulesBytes,omitempty"`
}

func (r *taskRun) state() loopState {
	l := r.lp
	var touched []string
	for p := range l.touched {
		touched = append(touched, p)
	}
	sort.Strings(touched)
	var given []string
	var used int
	if l.rules != nil {
		for d := range l.rules.given {
			given = append(given, d)
		}
		sort.Strings(given)
		used = l.rules.used
	}
	return loopState{RulesGiven: given, RulesBytes: used, Iterations: l.iterations, Granted: l.granted, Usage: l.usage, Cost: l.cost, Changes: l.changes,
		History: l.history, Writes: l.writes, Summaries: l.summaries, Touched: touched, Problems: l.problems,
		Consecutive: l.consecutive, Outcomes: l.outcomes, ToolChoiceFallback: l.toolChoiceFallback,
		Repairs: r.repairs, Trigger: r.trigger, Pending: l.pending, Asked: l.asked}
}

// restore puts the loop and build back where the checkpoint left them. The
// spend it holds was counted by the attempts that made it.
func (r *taskRun) restore(st loopState) {
	l := r.lp
	l.iterations, l.granted, l.usage, l.cost, l.changes = st.Iterations, st.Granted, st.Usage, st.Cost, st.Changes
	l.maxIterations = max(l.maxIterations, st.Granted)
	l.history, l.writes, l.summaries, l.problems = st.History, st.Writes, st.Summaries, st.Problems
	l.consecutive, l.outcomes, l.toolChoiceFallback, l.pending = st.Consecutive, st.Outcomes, st.ToolChoiceFallback, st.Pending
	l.asked = st.Asked
	l.touched = map[string]bool{}
	for _, p := range st.Touched {
		l.touched[p] = true
	}
	if l.summaries == nil {
		l.summaries = map[string]string{}
	}
	if l.rules != nil {
		// The conversation restored holds what was given: not again.
		l.rules.given, l.rules.used = map[string]bool{}, st.RulesBytes
		for _, d := range st.RulesGiven {
			l.rules.given[d] = true
		}
	}
	r.repairs, r.trigger = st.Repairs, st.Trigger
	l.markRecorded()
}

// checkpointRow encodes the conversation and state.
func (r *taskRun) checkpointRow(messages []llm.Message) (agentsql.Checkpoint, error) {
	msgs, err := json.Marshal(messages)
	if err != nil {
		return agentsql.Checkpoint{}, fmt.Errorf("encode conversation of task %s: %w", r.task.ID, err)
	}
	st, err := json.Marshal(r.state())
	if err != nil {
		return agentsql.Checkpoint{}, fmt.Errorf("encode loop state of task %s: %w", r.task.ID, err)
	}
	return agentsql.Checkpoint{TaskID: r.task.ID, Attempt: r.task.Attempt, Iteration: r.lp.iterations, Messages: msgs, State: st}, nil
}

// checkpoint saves the conversation after an iteration, with the
// iteration's queued events and its spend, in one round trip and one
// transaction. When the budget allows another iteration, the same round
// trip starts it, unless a pause was requested: the loop then stops at the
// boundary, as beforeIteration tells it.
func (r *taskRun) checkpoint(ctx context.Context, messages []llm.Message) error {
	cp, err := r.checkpointRow(messages)
	if err != nil {
		return err
	}
	spend := r.lp.unrecorded()
	var read agentsql.CheckpointRead
	var next events.Unpaused
	if r.lp.spent() == nil {
		next = events.Unpaused{Payloads: r.lp.startEvents(r.lp.iterations + 1), Paused: func() bool { return read.PauseRequested }}
	}
	started, _, err := r.rec.InPipelineUnpaused(ctx, r.runner.deps.Pool, func(p *agentsql.Pipeline) error {
		agentsql.QueueSaveCheckpoint(p, r.at.fence(r.task), cp, spend, &read)
		return nil
	}, next)
	if err != nil {
		return err
	}
	r.lp.markRecorded()
	r.pauseRead, r.cappedRead = &read.PauseRequested, &read.ProjectCapped
	if started {
		r.lp.started = r.lp.iterations + 1
	}
	return nil
}
func (r *taskRun) resumeFrom(ctx context.Context, cp agentsql.Checkpoint) ([]llm.Message, error) {
	var messages []llm.Message
	var st loopState
	if err := json.Unmarshal(cp.Messages, &messages); err != nil {
		return nil, &taskError{CodeInternal, fmt.Errorf("decode checkpoint of task %s: %w", r.task.ID, err)}
	}
	if err := json.Unmarshal(cp.State, &st); err != nil {
		return nil, &taskError{CodeInternal, fmt.Errorf("decode checkpoint state of task %s: %w", r.task.ID, err)}
	}
	r.restore(st)
	note := fmt.Sprintf("resumed from the checkpoint of iteration %d (attempt %d): %d messages, %d model calls not repeated",
		cp.Iteration, cp.Attempt, len(messages), cp.Iteration)
	if p := r.lp.pending; p != nil {
		answer, ok, err := agentsql.LastAnswer(ctx, r.runner.deps.Pool, r.task.ID)
		if err != nil {
			return nil, err
		}
		body := map[string]any{"success": true, "question": p.Question, "answer": answer}
		if !ok {
			body = map[string]any{"success": false, "question": p.Question, "error": "the question was not answered"}
		}
		out, _ := json.Marshal(body)
		messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: p.ToolCallID, Content: string(out)})
		r.lp.pending = nil
		note += "; the user's answer is the result of request_input"
	}
	r.rec.Add(events.Log{Level: events.LevelInfo, Message: note,
		Metadata: map[string]any{"checkpointIteration": cp.Iteration, "checkpointAttempt": cp.Attempt, "messages": len(messages)}})
	if len(r.lp.asked) > 0 {
		return r.answerAsked(ctx, messages)
	}
	return messages, nil
}
