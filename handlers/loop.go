package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
)

// Termination reasons of TerminationError.
const (
	ReasonMaxIterations = "max_iterations"
	ReasonToolFailures  = "tool_failures"
)

// TerminationError ends a loop that can no longer make progress. It is
// permanent: retrying the same conversation would end the same way.
type TerminationError struct {
	Reason string
	Detail string
}

func (e *TerminationError) Error() string {
	return fmt.Sprintf("agent loop stopped (%s): %s", e.Reason, e.Detail)
}

// loop is one run of the LLM tool-calling loop.
type loop struct {
	llm                *llm.Client
	registry           *tools.Registry
	env                tools.Env
	rec                *events.Recorder
	toolChoice         llm.ToolChoice
	maxIterations      int
	maxToolFailures    int
	stream             bool
	taskID             string
	iterations         int
	usage              llm.Usage
	changes            []events.FileUpdate
	toolChoiceFallback bool
}

// run drives the conversation until the model finishes (a reply without
// tool calls, or the finish tool), and returns the final text.
func (l *loop) run(ctx context.Context, messages []llm.Message) (string, []llm.Message, error) {
	consecutiveFailures := 0
	for l.iterations < l.maxIterations {
		l.iterations++
		if _, err := l.rec.Emit(ctx,
			events.Progress{Kind: events.KindIterationStart, Iteration: l.iterations, TotalIterations: l.maxIterations},
			events.Progress{Kind: events.KindThinking, Iteration: l.iterations},
		); err != nil {
			return "", messages, err
		}

		resp, err := l.complete(ctx, messages)
		if err != nil {
			return "", messages, err
		}
		messages = append(messages, resp.Message)

		if len(resp.Message.ToolCalls) == 0 {
			return resp.Message.Content, messages, nil
		}
		var finished *string
		for _, call := range resp.Message.ToolCalls {
			res, err := l.callTool(ctx, call)
			if err != nil {
				return "", messages, err
			}
			messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: res.Output})
			if res.Finished {
				s := res.Summary
				finished = &s
			}
			if res.Success {
				consecutiveFailures = 0
				continue
			}
			consecutiveFailures++
			if consecutiveFailures >= l.maxToolFailures {
				return "", messages, &TerminationError{Reason: ReasonToolFailures,
					Detail: fmt.Sprintf("%d consecutive tool calls failed; last: %s: %s", consecutiveFailures, call.Name, res.Summary)}
			}
		}
		if finished != nil {
			return *finished, messages, nil
		}
	}
	return "", messages, &TerminationError{Reason: ReasonMaxIterations,
		Detail: fmt.Sprintf("the model did not finish within %d iterations", l.maxIterations)}
}

// complete makes one LLM call, streaming content into coalesced
// stream_delta events.
func (l *loop) complete(ctx context.Context, messages []llm.Message) (llm.Response, error) {
	messageID := fmt.Sprintf("%s-%d", l.taskID, l.iterations)
	var streamErr error
	req := llm.Request{Messages: messages, Tools: l.registry.Definitions(), ToolChoice: l.toolChoice}
	if l.stream {
		req.OnDelta = func(delta string) {
			if streamErr == nil {
				streamErr = l.rec.StreamDelta(ctx, messageID, delta)
			}
		}
	}
	start := time.Now()
	resp, err := l.llm.Complete(ctx, req)
	if err != nil {
		return llm.Response{}, err
	}
	if streamErr != nil {
		return llm.Response{}, streamErr
	}
	l.usage = l.usage.Add(resp.Usage)
	if resp.ToolChoiceFallback && !l.toolChoiceFallback {
		l.toolChoiceFallback = true
		if _, err := l.rec.Emit(ctx, events.Log{Level: events.LevelWarn,
			Message: "the model endpoint rejected tool_choice \"required\"; continuing with \"auto\""}); err != nil {
			return llm.Response{}, err
		}
	}
	evs := []events.Payload{events.Log{Level: events.LevelDebug, Message: "llm call", Metadata: map[string]any{
		"iteration":        l.iterations,
		"model":            resp.Model,
		"promptTokens":     resp.Usage.PromptTokens,
		"completionTokens": resp.Usage.CompletionTokens,
		"durationMs":       float64(time.Since(start).Microseconds()) / 1000,
		"finishReason":     resp.FinishReason,
		"toolCalls":        len(resp.Message.ToolCalls),
	}}}
	if l.stream && resp.Message.Content != "" {
		if err := l.rec.StreamComplete(ctx, messageID, resp.Message.Content); err != nil {
			return llm.Response{}, err
		}
	}
	if _, err := l.rec.Emit(ctx, evs...); err != nil {
		return llm.Response{}, err
	}
	return resp, nil
}

// callTool runs one tool call with its progress, tool_call and file_update events.
func (l *loop) callTool(ctx context.Context, call llm.ToolCall) (tools.Result, error) {
	args := json.RawMessage(call.Arguments)
	if !json.Valid(args) {
		// Keep the event valid JSON; the raw text is still reported.
		args, _ = json.Marshal(map[string]string{"raw": call.Arguments})
	}
	if _, err := l.rec.Emit(ctx, events.Progress{Kind: events.KindToolStart, ToolName: call.Name, ToolArgs: args, Iteration: l.iterations}); err != nil {
		return tools.Result{}, err
	}
	start := time.Now()
	res := l.registry.Call(ctx, l.env, call.Name, call.Arguments)
	duration := time.Since(start).Milliseconds()
	success := res.Success
	result := json.RawMessage(res.Output)
	if !json.Valid(result) {
		result, _ = json.Marshal(res.Output)
	}
	evs := []events.Payload{
		events.Progress{Kind: events.KindToolComplete, ToolName: call.Name, ToolResult: result, ToolSuccess: &success, Duration: duration, Iteration: l.iterations},
		events.ToolCall{ToolName: call.Name, ArgsSummary: summarizeArgs(call), ResultSummary: res.Summary,
			Success: res.Success, Duration: duration, FromPath: res.FromPath, ToPath: res.ToPath},
	}
	for _, c := range res.Changes {
		evs = append(evs, c)
	}
	if _, err := l.rec.Emit(ctx, evs...); err != nil {
		return tools.Result{}, err
	}
	l.changes = append(l.changes, res.Changes...)
	return res, nil
}

// summarizeArgs renders a call's arguments for the timeline: paths as they
// are, long values cut.
func summarizeArgs(call llm.ToolCall) string {
	var args map[string]any
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return clip(call.Arguments, 120)
	}
	if from, ok := args["fromPath"].(string); ok {
		if to, ok := args["toPath"].(string); ok {
			return from + " → " + to
		}
	}
	if p, ok := args["path"].(string); ok {
		return p
	}
	if q, ok := args["query"].(string); ok {
		return clip(q, 120)
	}
	return clip(call.Arguments, 120)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
