package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/internal/gate"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/tracing"
)

// Termination reasons of TerminationError.
const (
	ReasonToolFailures = "tool_failures"
	// ReasonOscillation: the same call with the same arguments 3 times in
	// the last 5 calls (reads count as the same only while the project did
	// not change), or two calls alternating A, B, A, B.
	ReasonOscillation = "oscillation"
)

// repairable reports whether the self-repair loop may try again: the model
// got stuck, but it has not spent its budget.
func (e *TerminationError) repairable() bool {
	return e.Reason == ReasonToolFailures || e.Reason == ReasonOscillation
}

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
	llm *llm.Client
	log *slog.Logger // the run's: names its trace, task and run
	// model is the task's own model (its model, else its agent's); empty:
	// the client's.
	model              string
	registry           *tools.Registry
	env                tools.Env
	rec                *events.Recorder
	toolChoice         llm.ToolChoice
	maxIterations      int
	maxToolFailures    int
	toolStartDelay     time.Duration // Config.ToolStartDelay
	stream             bool
	taskID             string
	iterations         int
	usage              llm.Usage
	changes            []events.FileUpdate
	toolChoiceFallback bool

	// beforeFinish, when set, runs when the model calls finish; a non-empty
	// refusal is returned to the model instead, and the loop goes on.
	beforeFinish func(ctx context.Context) (refusal string, err error)
	// contextTokens is the conversation size (estimated) above which old
	// tool outputs are condensed. 0 means never.
	contextTokens int
	// finishChecked is set when beforeFinish accepted the finish.
	finishChecked bool

	// before, when set, runs at the top of every iteration; a *Suspension
	// from it (a pause request) stops the loop there.
	before func(ctx context.Context) error
	// after, when set, runs after every finished iteration with the
	// conversation: the checkpoint. It may write the next iteration's
	// start events (startEvents), and then sets started to its number.
	after   func(ctx context.Context, messages []llm.Message) error
	started int
	// alert, when set, raises a stuck alert of a kind (stuck_repeat,
	// stuck_errors) once per run.
	alert func(ctx context.Context, kind, detail string) error
	// budget stops the loop with a budget suspension when spent; the
	// iteration budget is maxIterations. ceiling is the operator's, which
	// the task's input cannot raise.
	budget  Budget
	ceiling Budget
	price   llm.Price
	cost    float64
	// recorded is the usage and cost already counted on the task's run
	// (by checkpoints, or by earlier attempts).
	recorded     llm.Usage
	recordedCost float64
	// rateWait is the time the model calls waited for the provider's rate
	// limit; recordedWait the part of it counted on the run.
	rateWait, recordedWait time.Duration
	// granted is the iteration cap a repair attempt raised maxIterations to.
	granted int
	// pending is the request_input call waiting for the user's answer.
	pending *pendingInput
	// policies decide each call (allow, ask, deny): the strictest of
	// them holds. asked are the calls of the last turn that wait for a
	// person's answer; approved, the calls being run on a person's word.
	policies []tools.CallPolicy
	asked    []askedCall
	approved map[string]bool
	// noAsk, when set, says why this loop cannot wait for approval.
	noAsk    string
	outcomes []bool          // success of the last calls, for the error rate
	alerted  map[string]bool // alert kinds raised this run

	history []string // signatures of the calls made
	writes  int      // successful write calls so far
	// failed holds each failed call by signature, with the state of what
	// it depends on: an identical repeat in the same state is answered
	// with the earlier error instead of being run again.
	failed map[string]failedCall
	// pathWrites counts the successful changes of each path.
	pathWrites map[string]int
	// failures are the distinct calls that failed since the last repair
	// attempt, oldest first, quoted in the repair message.
	failures    []prompts.FailedCall
	summaries   map[string]string // tool_call_id → one-line result
	touched     map[string]bool   // paths changed
	problems    []string          // the last failed calls, for condensation notes
	consecutive int               // failed tool calls in a row
	// rules are the project's rules files: a folder's are given to the
	// model with the first tool result under it.
	rules *projectRules
}

// grant lets a repair attempt run at least budget more iterations, with
// fresh failure and oscillation counters. The failed calls stay known: a
// repair attempt does not get to repeat them.
func (l *loop) grant(budget int) {
	l.maxIterations = max(l.maxIterations, l.iterations+budget)
	l.granted = l.maxIterations
	l.consecutive = 0
	l.history = nil
	l.failures = nil
}

// failedCall is a call that failed and the state it failed in.
type failedCall struct {
	output    string // what the model got
	message   string // the error, one line
	iteration int
	state     string
}

// notRunPrefix starts the summary of a repeat answered without running.
const notRunPrefix = "not run: repeats a failed call: "

// retriedOnFailure are the tools whose failure may pass on its own (an
// image service, a question), so an identical call is run again.
var retriedOnFailure = map[string]bool{"generate_image": true, "request_input": true}

// callKey is a call's signature: its name and canonical arguments.
func callKey(call llm.ToolCall) string {
	return call.Name + " " + canonicalArgs(call.Arguments)
}

// stateOf names the state a call's outcome depends on: the versions of
// the paths it names, or of the whole project when it names none.
func (l *loop) stateOf(call llm.ToolCall) string {
	var args map[string]any
	_ = json.Unmarshal([]byte(call.Arguments), &args)
	var parts []string
	for _, k := range []string{"path", "fromPath", "toPath"} {
		if p, ok := args[k].(string); ok {
			parts = append(parts, fmt.Sprintf("%s@%d", p, l.pathWrites[p]))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("project@%d", l.writes)
	}
	return strings.Join(parts, ",")
}

// repeated answers a call identical to one that already failed, in the
// same state, with that failure, without running it.
func (l *loop) repeated(call llm.ToolCall) (tools.Result, bool) {
	if retriedOnFailure[call.Name] {
		return tools.Result{}, false
	}
	f, ok := l.failed[callKey(call)]
	if !ok || f.state != l.stateOf(call) {
		return tools.Result{}, false
	}
	var earlier any = f.output
	if json.Valid([]byte(f.output)) {
		earlier = json.RawMessage(f.output)
	}
	msg := fmt.Sprintf("not run: this exact call already failed at iteration %d, and nothing it depends on has changed since; it failed with: %s", f.iteration, f.message)
	r := tools.FailWith(msg, "change the arguments to fix what the error says (read the file again and copy the text exactly), or take another approach",
		map[string]any{"earlierResult": earlier})
	r.Summary = notRunPrefix + f.message
	return r, true
}

// remember notes a failed call, for repeats and the repair message.
func (l *loop) remember(call llm.ToolCall, res tools.Result) {
	if retriedOnFailure[call.Name] {
		return
	}
	if l.failed == nil {
		l.failed = map[string]failedCall{}
	}
	key := callKey(call)
	f, seen := l.failed[key]
	if !seen || !strings.HasPrefix(res.Summary, notRunPrefix) {
		// A repeat keeps the first failure: its error is the one to quote.
		f = failedCall{output: res.Output, message: errorOf(res), iteration: l.iterations, state: l.stateOf(call)}
		l.failed[key] = f
	}
	msg := f.message
	quoted := call.Name + " " + clip(canonicalArgs(call.Arguments), 1500)
	for i, f := range l.failures {
		if f.Call == quoted {
			l.failures = append(l.failures[:i], l.failures[i+1:]...)
			break
		}
	}
	l.failures = append(l.failures, prompts.FailedCall{Call: quoted, Error: clip(msg, 600)})
	if len(l.failures) > 3 {
		l.failures = l.failures[len(l.failures)-3:]
	}
}

// errorOf is a failed result's error message.
func errorOf(res tools.Result) string {
	var body struct {
		Error string `json:"error"`
		Hint  string `json:"hint"`
	}
	if json.Unmarshal([]byte(res.Output), &body) == nil && body.Error != "" {
		if body.Hint != "" {
			return body.Error + " (hint: " + body.Hint + ")"
		}
		return body.Error
	}
	return res.Summary
}

// run drives the conversation until the model finishes (a reply without
// tool calls, or the finish tool), and returns the final text. A
// *Suspension stops it at an iteration boundary: a pause request, a spent
// budget, or a question for the user.
func (l *loop) run(ctx context.Context, messages []llm.Message) (string, []llm.Message, error) {
	for {
		if l.before != nil {
			if err := l.before(ctx); err != nil {
				return "", messages, err
			}
		}
		if s := l.spent(); s != nil {
			return "", messages, s
		}
		l.iterations++
		if l.started < l.iterations {
			// Written while the model thinks: the statement overlaps the LLM
			// call instead of delaying it (the next write waits for it).
			l.rec.Add(l.startEvents(l.iterations)...)
			l.rec.FlushAsync(ctx)
		}
		var err error
		if messages, err = l.condense(ctx, messages); err != nil {
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
		var asked []llm.ToolCall
		for i, call := range resp.Message.ToolCalls {
			if d := l.decide(call); d.Action == tools.PolicyAsk {
				// Not run: it waits for a person, and its result joins the
				// conversation when the task goes on.
				asked = append(asked, call)
				continue
			}
			res, err := l.callTool(ctx, call)
			if err != nil {
				return "", messages, err
			}
			if res.Question != "" {
				// The answer becomes this call's result when the task resumes;
				// the calls after it wait for the answer too.
				messages = notRun(messages, resp.Message.ToolCalls[i+1:], "not run: the task waited for the user's answer; call again if still needed")
				messages = notRun(messages, asked, "not run: the task waited for the user's answer; call again if still needed")
				l.pending = &pendingInput{ToolCallID: call.ID, Question: res.Question}
				return "", messages, &Suspension{Status: agentsql.StatusAwaitingInput, Code: CodeAwaitingInput,
					Reason: ReasonQuestion, Message: res.Question}
			}
			content := res.Output
			if res.Success {
				rules, err := l.rules.forCall(ctx, l.env.Store, l.env.ProjectID, call)
				if err != nil {
					return "", messages, err
				}
				if rules != "" {
					// With the result itself, so that condensing old outputs
					// drops the output, never the rules (see condense).
					content += "\n\n" + rulesMark + rules
				}
			}
			messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: content})
			if res.Finished {
				s := res.Summary
				finished = &s
			}
			term := l.account(call, res)
			if err := l.watch(ctx, term); err != nil {
				return "", messages, err
			}
			if term != nil {
				// Answer the calls not run, so the conversation stays valid
				// for a repair attempt.
				messages = notRun(messages, resp.Message.ToolCalls[i+1:], "not run: the loop was stopped")
				messages = notRun(messages, asked, "not run: the loop was stopped")
				return "", messages, term
			}
		}
		if finished != nil {
			messages = notRun(messages, asked, "not run: the task finished")
			return *finished, messages, nil
		}
		if len(asked) > 0 {
			return "", messages, l.askFor(asked)
		}
		if l.after != nil {
			if err := l.after(ctx, messages); err != nil {
				return "", messages, err
			}
		}
	}
}

func notRun(messages []llm.Message, calls []llm.ToolCall, why string) []llm.Message {
	body, _ := json.Marshal(map[string]any{"success": false, "error": why})
	for _, c := range calls {
		messages = append(messages, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: string(body)})
	}
	return messages
}

// startEvents are the events an iteration starts with.
func (l *loop) startEvents(iteration int) []events.Payload {
	return []events.Payload{
		events.Progress{Kind: events.KindIterationStart, Iteration: iteration, TotalIterations: l.maxIterations},
		events.Progress{Kind: events.KindThinking, Iteration: iteration},
	}
}

// spent returns a budget suspension when the loop used up its iterations,
// tokens or cost.
func (l *loop) spent() *Suspension {
	switch {
	case l.iterations >= l.maxIterations:
		return budgetSuspension("max_iterations", fmt.Sprintf("the iteration budget of %d is spent", l.maxIterations),
			l.maxIterations >= l.ceiling.MaxIterations)
	case l.budget.MaxTokens > 0 && l.usage.TotalTokens >= l.budget.MaxTokens:
		return budgetSuspension("max_tokens", fmt.Sprintf("the token budget of %d is spent (%d used)", l.budget.MaxTokens, l.usage.TotalTokens),
			l.ceiling.MaxTokens > 0 && l.budget.MaxTokens >= l.ceiling.MaxTokens)
	case l.budget.MaxCostUSD > 0 && l.cost >= l.budget.MaxCostUSD:
		return budgetSuspension("max_cost", fmt.Sprintf("the cost budget of $%.4f is spent ($%.4f used)", l.budget.MaxCostUSD, l.cost),
			l.ceiling.MaxCostUSD > 0 && l.budget.MaxCostUSD >= l.ceiling.MaxCostUSD)
	}
	return nil
}

// unrecorded is the spend not yet counted on the task's run.
func (l *loop) unrecorded() agentsql.Spend {
	return agentsql.Spend{TokensIn: l.usage.PromptTokens - l.recorded.PromptTokens,
		TokensOut: l.usage.CompletionTokens - l.recorded.CompletionTokens, Cost: l.cost - l.recordedCost,
		RateWait: l.rateWait - l.recordedWait}
}

// markRecorded notes that the spend so far is counted.
func (l *loop) markRecorded() {
	l.recorded, l.recordedCost, l.recordedWait = l.usage, l.cost, l.rateWait
}

// Error-rate alert: at least errorAlertFailed of the last errorAlertWindow
// tool calls failed.
const (
	errorAlertWindow = 10
	errorAlertFailed = 6
)

// watch raises the stuck alerts a call's outcome calls for: repeated
// actions (oscillation) and a high tool error rate.
func (l *loop) watch(ctx context.Context, term *TerminationError) error {
	if l.alert == nil {
		return nil
	}
	failed := 0
	for _, ok := range l.outcomes {
		if !ok {
			failed++
		}
	}
	kind, detail := "", ""
	switch {
	case term != nil && term.Reason == ReasonOscillation:
		kind, detail = AlertRepeat, term.Detail
	case term != nil && term.Reason == ReasonToolFailures:
		kind, detail = AlertErrors, term.Detail
	case len(l.outcomes) >= errorAlertWindow && failed >= errorAlertFailed:
		kind, detail = AlertErrors, fmt.Sprintf("%d of the last %d tool calls failed", failed, len(l.outcomes))
	}
	if kind == "" || l.alerted[kind] {
		return nil
	}
	if l.alerted == nil {
		l.alerted = map[string]bool{}
	}
	l.alerted[kind] = true
	return l.alert(ctx, kind, detail)
}

// account records a call's outcome and returns a TerminationError when the
// loop should stop: too many failures in a row, or oscillation.
func (l *loop) account(call llm.ToolCall, res tools.Result) *TerminationError {
	if l.summaries == nil {
		l.summaries, l.touched = map[string]string{}, map[string]bool{}
	}
	l.summaries[call.ID] = call.Name + ": " + res.Summary
	sig := call.Name + "(" + canonicalArgs(call.Arguments) + ")"
	if !l.registry.Writes(call.Name) {
		// A read repeats only while the project is unchanged.
		sig += fmt.Sprintf("@%d", l.writes)
	}
	l.history = append(l.history, sig)
	l.outcomes = append(l.outcomes, res.Success)
	if len(l.outcomes) > errorAlertWindow {
		l.outcomes = l.outcomes[1:]
	}
	if res.Success {
		l.consecutive = 0
		if len(res.Changes) > 0 {
			l.writes++
			if l.pathWrites == nil {
				l.pathWrites = map[string]int{}
			}
			for _, c := range res.Changes {
				l.touched[c.Path] = true
				for _, p := range []string{c.Path, c.FromPath, c.ToPath} {
					if p != "" {
						l.pathWrites[p]++
					}
				}
			}
		}
	} else {
		l.remember(call, res)
		l.consecutive++
		l.problems = append(l.problems, call.Name+": "+res.Summary)
		if len(l.problems) > 3 {
			l.problems = l.problems[1:]
		}
		if l.consecutive >= l.maxToolFailures {
			return &TerminationError{Reason: ReasonToolFailures,
				Detail: fmt.Sprintf("%d consecutive tool calls failed; last: %s: %s", l.consecutive, call.Name, res.Summary)}
		}
	}
	if detail := oscillation(l.history); detail != "" {
		return &TerminationError{Reason: ReasonOscillation, Detail: detail}
	}
	return nil
}

// oscillation reports the same call 3 times in the last 5, or two calls
// alternating A, B, A, B.
func oscillation(h []string) string {
	n := len(h)
	if n == 0 {
		return ""
	}
	last := h[n-1]
	same := 0
	for _, s := range h[max(0, n-5):] {
		if s == last {
			same++
		}
	}
	if same >= 3 {
		return fmt.Sprintf("the same call was made %d times in the last %d calls: %s", same, min(n, 5), clip(stripVersion(last), 160))
	}
	if n >= 4 && h[n-1] == h[n-3] && h[n-2] == h[n-4] && h[n-1] != h[n-2] {
		return fmt.Sprintf("two calls keep alternating: %s and %s", clip(stripVersion(h[n-2]), 100), clip(stripVersion(last), 100))
	}
	return ""
}

func stripVersion(sig string) string {
	if i := strings.LastIndex(sig, ")@"); i >= 0 {
		return sig[:i+1]
	}
	return sig
}

// canonicalArgs re-encodes JSON arguments with sorted keys, so the same
// arguments in another order are the same call.
func canonicalArgs(raw string) string {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// condense keeps the conversation within contextTokens: the outputs of all
// but the most recent tool calls are replaced by their one-line summaries,
// and a note restates the files changed and the open problems. The system
// prompt (with the plan) and the user's goal are never touched.
func (l *loop) condense(ctx context.Context, messages []llm.Message) ([]llm.Message, error) {
	if l.contextTokens <= 0 || estimateTokens(messages) <= l.contextTokens {
		return messages, nil
	}
	const keepRecent = 6
	before := estimateTokens(messages)
	condensed := 0
	for i := range len(messages) - keepRecent {
		m := &messages[i]
		if m.Role != llm.RoleTool || strings.HasPrefix(m.Content, `{"condensed":true`) {
			continue
		}
		sum := l.summaries[m.ToolCallID]
		if sum == "" {
			sum = clip(m.Content, 200)
		}
		b, _ := json.Marshal(map[string]any{"condensed": true, "summary": sum, "note": "output condensed to save context; call the tool again if you need it"})
		if _, rules, ok := strings.Cut(m.Content, rulesMark); ok {
			b = append(b, "\n\n"+rulesMark+rules...)
		}
		m.Content = string(b)
		condensed++
	}
	if condensed == 0 {
		return messages, nil
	}
	var touched []string
	for p := range l.touched {
		touched = append(touched, p)
	}
	sort.Strings(touched)
	note := "Context note: older tool outputs were condensed to keep the conversation within the model's window. The task and the plan above still apply."
	if len(touched) > 0 {
		note += "\nFiles changed so far: " + strings.Join(touched, ", ") + "."
	}
	if len(l.problems) > 0 {
		note += "\nOpen problems: " + strings.Join(l.problems, "; ") + "."
	}
	messages = append(messages, llm.Message{Role: llm.RoleUser, Content: note})
	_, err := l.rec.Emit(ctx, events.Log{Level: events.LevelInfo, Message: "context condensed", Metadata: map[string]any{
		"iteration": l.iterations, "condensedMessages": condensed, "tokensBefore": before, "tokensAfter": estimateTokens(messages)}})
	return messages, err
}

// estimateTokens is a rough token count: four bytes a token.
func estimateTokens(messages []llm.Message) int {
	n := 0
	for _, m := range messages {
		n += len(m.Content) + 16
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return n / 4
}

// complete makes one LLM call offering the tools, streaming content into
// coalesced stream_delta events.
func (l *loop) complete(ctx context.Context, messages []llm.Message) (llm.Response, error) {
	return l.call(ctx, llm.Request{Messages: messages, Tools: l.registry.Definitions(), ToolChoice: l.toolChoice})
}

// generate makes one LLM call without tools: plain text, or JSON for a schema.
func (l *loop) generate(ctx context.Context, messages []llm.Message, schema *llm.ResponseSchema) (llm.Response, error) {
	return l.call(ctx, llm.Request{Messages: messages, ResponseSchema: schema})
}

func (l *loop) call(ctx context.Context, req llm.Request) (llm.Response, error) {
	messageID := fmt.Sprintf("%s-%d", l.taskID, l.iterations)
	var streamErr error
	if l.stream {
		req.OnDelta = func(delta string) {
			if streamErr == nil {
				streamErr = l.rec.StreamDelta(ctx, messageID, delta)
			}
		}
	}
	var waitErr error
	req.OnRateLimitWait = func(d time.Duration) {
		// Written at once: the timeline shows why nothing moves. The
		// wait itself holds no connection and no turn.
		if waitErr == nil {
			_, waitErr = l.rec.Emit(ctx, events.Progress{Kind: events.KindRateLimitWait, Iteration: l.iterations,
				Duration: d.Milliseconds(), Message: fmt.Sprintf("waiting for the provider's rate limit (about %s)", d.Round(time.Second))})
		}
	}
	req.Model = l.model
	start := time.Now()
	// The model call is a wait: the task gives up its turn to work.
	resp, err := gate.Wait(ctx, func() (llm.Response, error) { return l.llm.Complete(ctx, req) })
	l.rateWait += resp.RateLimitWait // a call that failed waited too
	if err != nil {
		return llm.Response{}, err
	}
	if streamErr != nil {
		return llm.Response{}, streamErr
	}
	if waitErr != nil {
		return llm.Response{}, waitErr
	}
	l.usage = l.usage.Add(resp.Usage)
	l.cost += l.price.Cost(resp.Usage)
	if resp.ToolChoiceFallback && !l.toolChoiceFallback {
		l.toolChoiceFallback = true
		l.rec.Add(events.Log{Level: events.LevelWarn,
			Message: "the model endpoint rejected tool_choice \"required\"; continuing with \"auto\""})
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
	l.rec.Add(evs...) // written before the next wait (a tool call or the next LLM call)
	l.log.LogAttrs(ctx, slog.LevelInfo, "llm call", slog.Int("iteration", l.iterations), slog.String("model", resp.Model),
		slog.Int64("prompt_tokens", resp.Usage.PromptTokens), slog.Int64("completion_tokens", resp.Usage.CompletionTokens),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000), slog.String("finish_reason", resp.FinishReason))
	return resp, nil
}

// callTool runs one tool call with its progress, tool_call and file_update
// events, in its execute_tool span.
func (l *loop) callTool(ctx context.Context, call llm.ToolCall) (tools.Result, error) {
	ctx, span := tracing.StartTool(ctx, call.Name, call.ID)
	ran := true
	res, err := l.runTool(ctx, call, &ran)
	switch {
	case err != nil:
		span.End(tracing.OutcomeError, err)
	case !ran:
		span.End(tracing.OutcomeNotRun, nil)
	case res.Success && (res.ExitCode == nil || *res.ExitCode == 0):
		span.End(tracing.OutcomeSuccess, nil)
	default:
		span.End(tracing.OutcomeFailure, nil)
	}
	return res, err
}

// runTool is callTool's work; ran is cleared when the call was answered
// without running the tool (denied, or a repeat).
func (l *loop) runTool(ctx context.Context, call llm.ToolCall, ran *bool) (tools.Result, error) {
	args := json.RawMessage(call.Arguments)
	if !json.Valid(args) {
		// Keep the event valid JSON; the raw text is still reported.
		args, _ = json.Marshal(map[string]string{"raw": call.Arguments})
	}
	// tool_start is written only if the tool is still running after
	// l.toolStartDelay: a fast tool's start and result land in one statement,
	// a slow one (a search over a large project, an image) shows as running.
	l.rec.Add(events.Progress{Kind: events.KindToolStart, ToolName: call.Name, ToolArgs: args, Iteration: l.iterations})
	flushed := make(chan error, 1)
	timer := time.AfterFunc(l.toolStartDelay, func() {
		_, err := l.rec.Flush(ctx)
		flushed <- err
	})
	start := time.Now()
	res, repeat := l.denied(call)
	if !repeat {
		res, repeat = l.repeated(call)
	}
	stopped := false
	var turnWait time.Duration // waiting for a turn to work again is not the tool's time
	if repeat {
		stopped = timer.Stop()
		*ran = false
	} else {
		// A tool may wait long (a command, an image): without the turn.
		// tool_start is due when the tool outlasts the delay, not when
		// the turn comes back late.
		var returned time.Time
		if err := gate.Outside(ctx, func() {
			res = l.registry.Call(ctx, l.env, call.Name, call.Arguments)
			stopped = timer.Stop()
			returned = time.Now()
		}); err != nil {
			return tools.Result{}, err
		}
		turnWait = time.Since(returned)
	}
	if !stopped {
		// The flush ran or is running: wait for it, so nothing written after
		// it can take an earlier seq.
		if err := <-flushed; err != nil {
			return tools.Result{}, err
		}
	}
	if res.Err != nil {
		// An outage is the service's to ride out, not the model's: the
		// attempt ends and the task is retried from its checkpoint.
		return tools.Result{}, res.Err
	}
	if res.Finished && l.beforeFinish != nil {
		refusal, err := l.beforeFinish(ctx)
		if err != nil {
			return tools.Result{}, err
		}
		l.finishChecked = refusal == ""
		if refusal != "" {
			res = tools.Fail("finish refused: the static checks of your changes failed (state: FIX)", refusal)
		}
	}
	duration := (time.Since(start) - turnWait).Milliseconds()
	success := res.Success
	full := res.Output
	if res.Full != "" {
		full = res.Full
	}
	result := json.RawMessage(full)
	if !json.Valid(result) {
		result, _ = json.Marshal(full)
	}
	// A command that ran to a non-zero exit is a call the model acts on,
	// not a failed call for the loop, but the timeline shows it failed: a
	// failing check is never a green tick.
	if res.ExitCode != nil && *res.ExitCode != 0 {
		success = false
	}
	evs := []events.Payload{
		events.Progress{Kind: events.KindToolComplete, ToolName: call.Name, ToolResult: result, ToolSuccess: &success, Duration: duration, Iteration: l.iterations},
		events.ToolCall{ToolName: call.Name, ArgsSummary: summarizeArgs(call), ResultSummary: res.Summary,
			Success: success, Duration: duration, FromPath: res.FromPath, ToPath: res.ToPath,
			Command: res.Command, ExitCode: res.ExitCode},
	}
	for _, c := range res.Changes {
		evs = append(evs, c)
	}
	for _, lg := range res.Logs {
		evs = append(evs, lg)
	}
	l.rec.Add(evs...) // written with the next tool_start or iteration_start
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
	if c, ok := args["command"].(string); ok {
		return c
	}
	return clip(call.Arguments, 120)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
