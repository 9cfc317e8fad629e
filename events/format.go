package events

import (
	"fmt"
	"strings"

	"github.com/agentworker/agentworker/traceid"
)

// Terminal reports whether ev ends a task's timeline (the task succeeded,
// failed, was blocked or was cancelled).
func Terminal(ev Event) bool {
	if ev.Type != TypeAgentPhase {
		return false
	}
	p, err := ev.Decode()
	if err != nil {
		return false
	}
	switch p.(*AgentPhase).Phase {
	case PhaseCompleted, PhaseFailed, PhaseCancelled, PhaseBlocked:
		return true
	}
	return false
}

// Format renders an event as one human-readable line, for terminals.
func Format(ev Event) string {
	head := fmt.Sprintf("#%-4d %s %-11s", ev.Seq, ev.CreatedAt.Format("15:04:05.000"), ev.Type)
	p, err := ev.Decode()
	if err != nil {
		return head + " " + string(ev.Payload)
	}
	var body string
	switch p := p.(type) {
	case *AgentPhase:
		body = strings.TrimSpace(fmt.Sprintf("%s %s %s", p.Phase, p.Action, p.Status))
		if p.Summary != "" {
			body += ": " + p.Summary
		}
		if p.TraceID != "" {
			body += " [trace " + safeTrace(p.TraceID) + "]"
		}
	case *ToolCall:
		mark := "ok"
		if !p.Success {
			mark = "FAILED"
		}
		body = fmt.Sprintf("%s(%s) %s %dms: %s", p.ToolName, p.ArgsSummary, mark, p.Duration, p.ResultSummary)
	case *FileUpdate:
		body = fmt.Sprintf("%s %s", p.Op, p.Path)
		if p.Op == OpMove {
			body = fmt.Sprintf("move %s → %s", p.FromPath, p.ToPath)
		}
	case *SelfRepair:
		body = fmt.Sprintf("attempt %d/%d (%s): %s", p.AttemptNumber, p.MaxAttempts, p.Result, p.Trigger)
	case *Log:
		body = fmt.Sprintf("[%s] %s", p.Level, p.Message)
	case *Error:
		body = fmt.Sprintf("%s: %s (recoverable=%t)", p.ErrorType, p.Message, p.Recoverable)
	case *Progress:
		body = string(p.Kind)
		switch p.Kind {
		case KindStageEnter, KindStageExit:
			body += " " + p.Stage
		case KindIterationStart:
			body += fmt.Sprintf(" %d/%d", p.Iteration, p.TotalIterations)
		case KindToolStart, KindToolComplete:
			body += " " + p.ToolName
		case KindStreamDelta:
			body += fmt.Sprintf(" %q", p.Delta)
		case KindStreamComplete:
			body += fmt.Sprintf(" (%d bytes)", p.TotalLength)
		case KindRateLimitWait:
			body += fmt.Sprintf(" %dms", p.Duration)
		}
		if p.Message != "" {
			body += ": " + p.Message
		}
	}
	return head + " " + body
}

// safeTrace is a trace id fit for a terminal: a payload is read back from
// the database, so an id that is not Valid is quoted, never printed raw.
func safeTrace(id string) string {
	if traceid.Valid(id) {
		return id
	}
	return fmt.Sprintf("%q", id)
}
