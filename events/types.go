// Package events holds the typed agent event model (the types agent_events
// accepts and their payloads), the Recorder that appends a task's events with
// per-task seq, and Follow, which streams a task's timeline from a cursor
// without loss: LISTEN first, then the backlog, then live events.
package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Type is the agent_events.type column.
type Type string

// Event types. Progress kinds are written as TypeProgress, never as
// agent_phase, so frontends that switch on type see them.
const (
	TypeAgentPhase Type = "agent_phase"
	TypeToolCall   Type = "tool_call"
	TypeFileUpdate Type = "file_update"
	TypeSelfRepair Type = "self_repair"
	TypeLog        Type = "log"
	TypeError      Type = "error"
	TypeProgress   Type = "progress"
	// TypeToolApprovalRequested: a tool call asked, by the task's tool
	// policy, and waits for a person.
	TypeToolApprovalRequested Type = "tool_approval_requested"
	// TypeToolApprovalAnswered: a person approved or denied a call that asked.
	TypeToolApprovalAnswered Type = "tool_approval_answered"
)

// Payload is the body of one event; each event type has its own struct.
type Payload interface {
	EventType() Type
}

// Phase values of AgentPhase. The first four are the agent roles of the
// spec; the rest mark the task lifecycle.
const (
	PhasePlanner   = "planner"
	PhaseCoder     = "coder"
	PhaseReviewer  = "reviewer"
	PhaseDebugger  = "debugger"
	PhaseStarted   = "started"
	PhaseCompleted = "completed"
	PhaseFailed    = "failed"
	PhaseRetrying  = "retrying"
	PhaseCancelled = "cancelled"
	// PhaseBlocked: the task stopped because a result did not meet its
	// expectation; it needs a person (retry after a fix).
	PhaseBlocked = "blocked"
	// PhasePaused: the task stopped at an iteration boundary (a pause
	// request, a spent budget) and waits for a resume; its checkpoint keeps
	// its place.
	PhasePaused = "paused"
	// PhaseAwaitingInput: the agent asked the user a question
	// (request_input) and waits for the answer.
	PhaseAwaitingInput = "awaiting_input"
	// PhaseWaiting: a dependency of the task has not succeeded yet; the
	// task waits without a job.
	PhaseWaiting = "waiting"
	// PhaseQueued: the task is queued again (a resume, a retry, an answer,
	// or its last dependency's success).
	PhaseQueued = "queued"
	// PhaseReview: a build finished cleanly and waits for a person to
	// approve or reject its staged change set.
	PhaseReview = "review"
	// PhaseAwaitingApproval: a tool call of the last model turn asked,
	// by the task's tool policy, and the task waits until every such call
	// is approved or denied.
	PhaseAwaitingApproval = "awaiting_approval"
)

// AgentPhase marks a change of agent phase or task lifecycle.
type AgentPhase struct {
	Phase    string `json:"phase"`
	Action   string `json:"action,omitempty"` // enter | exit
	Status   string `json:"status,omitempty"` // the task status after this phase
	TaskType string `json:"taskType,omitempty"`
	Model    string `json:"model,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Summary  string `json:"summary,omitempty"`
	// TraceID is the trace the task's log lines carry (the request that
	// created it): on the phase a handler enters and on the task's end.
	TraceID string `json:"traceId,omitempty"`
}

// EventType implements Payload.
func (AgentPhase) EventType() Type { return TypeAgentPhase }

// ToolCall records one tool call and its outcome.
type ToolCall struct {
	ToolName      string `json:"toolName"`
	ArgsSummary   string `json:"argsSummary,omitempty"`
	ResultSummary string `json:"resultSummary,omitempty"`
	Success       bool   `json:"success"`            // false too when a command ran to a non-zero exit
	Duration      int64  `json:"duration,omitempty"` // milliseconds
	FromPath      string `json:"fromPath,omitempty"` // move_file only
	ToPath        string `json:"toPath,omitempty"`   // move_file only
	Command       string `json:"command,omitempty"`  // run_command only: what ran, e.g. npm run typecheck
	ExitCode      *int   `json:"exitCode,omitempty"` // run_command only: the command's exit code, -1 when killed
}

// EventType implements Payload.
func (ToolCall) EventType() Type { return TypeToolCall }

// File operations of FileUpdate.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
	OpMove   = "move"
)

// FileUpdate records a change to the project's files.
type FileUpdate struct {
	Path     string `json:"path"` // the target path (toPath for a move)
	Op       string `json:"op"`
	Summary  string `json:"summary,omitempty"`
	FromPath string `json:"fromPath,omitempty"` // move only
	ToPath   string `json:"toPath,omitempty"`   // move only
	FileSize int64  `json:"fileSize,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// EventType implements Payload.
func (FileUpdate) EventType() Type { return TypeFileUpdate }

// SelfRepair records one attempt of the self-repair loop.
type SelfRepair struct {
	AttemptNumber int    `json:"attemptNumber"`
	MaxAttempts   int    `json:"maxAttempts"`
	Trigger       string `json:"trigger"`
	ErrorType     string `json:"errorType,omitempty"`
	ErrorMessage  string `json:"errorMessage,omitempty"`
	Suggestion    string `json:"suggestion,omitempty"`
	Result        string `json:"result"` // pending | success | failed
}

// EventType implements Payload.
func (SelfRepair) EventType() Type { return TypeSelfRepair }

// Log levels of Log.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Log is an unclassified log line.
type Log struct {
	Level    string         `json:"level"`
	Message  string         `json:"message"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// EventType implements Payload.
func (Log) EventType() Type { return TypeLog }

// Error records a failure; Recoverable says whether the task goes on (or is retried).
type Error struct {
	ErrorType   string `json:"errorType"`
	Message     string `json:"message"`
	Stack       string `json:"stack,omitempty"`
	Recoverable bool   `json:"recoverable"`
}

// EventType implements Payload.
func (Error) EventType() Type { return TypeError }

// ProgressKind is the kind of a progress event.
type ProgressKind string

// Progress kinds: the payload.kind of a TypeProgress event.
const (
	KindStageEnter     ProgressKind = "stage_enter"
	KindStageExit      ProgressKind = "stage_exit"
	KindIterationStart ProgressKind = "iteration_start"
	KindToolStart      ProgressKind = "tool_start"
	KindToolComplete   ProgressKind = "tool_complete"
	KindThinking       ProgressKind = "thinking"
	KindStreamDelta    ProgressKind = "stream_delta"
	KindStreamComplete ProgressKind = "stream_complete"
	// KindRateLimitWait: the task waits for its model provider's rate
	// limit, for about duration milliseconds, before its next call.
	KindRateLimitWait ProgressKind = "rate_limit_wait"
)

// Progress is a progress event. Which fields are set depends on Kind.
type Progress struct {
	Kind      ProgressKind `json:"kind"`
	Timestamp time.Time    `json:"timestamp"`

	// stage_enter / stage_exit
	Stage   string `json:"stage,omitempty"`
	Message string `json:"message,omitempty"`

	// iteration_start
	Iteration       int `json:"iteration,omitempty"`
	TotalIterations int `json:"totalIterations,omitempty"`

	// tool_start / tool_complete
	ToolName    string          `json:"toolName,omitempty"`
	ToolArgs    json.RawMessage `json:"toolArgs,omitempty"`
	ToolResult  json.RawMessage `json:"toolResult,omitempty"`
	ToolSuccess *bool           `json:"toolSuccess,omitempty"`
	Duration    int64           `json:"duration,omitempty"` // milliseconds; rate_limit_wait: the expected wait

	// stream_delta / stream_complete
	Delta       string `json:"delta,omitempty"`
	Content     string `json:"content,omitempty"`
	MessageID   string `json:"messageId,omitempty"`
	Seq         int    `json:"seq,omitempty"`
	TotalLength int    `json:"totalLength,omitempty"`
}

// EventType implements Payload.
func (Progress) EventType() Type { return TypeProgress }

// Decisions of ToolApprovalAnswered.
const (
	DecisionApproved = "approved"
	DecisionDenied   = "denied"
)

// ToolApprovalRequested records a tool call that was not run because a
// rule of the task's tool policy asks: it runs once approved.
type ToolApprovalRequested struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	// Arguments are the call's arguments as the model sent them.
	Arguments string `json:"arguments"`
	Reason    string `json:"reason,omitempty"` // the rule's
}

// EventType implements Payload.
func (ToolApprovalRequested) EventType() Type { return TypeToolApprovalRequested }

// ToolApprovalAnswered records a person's answer to a call that asked.
type ToolApprovalAnswered struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Decision   string `json:"decision"`
	// Message is a denial's, which the model reads as the call's result.
	Message string `json:"message,omitempty"`
	Actor   string `json:"actor"`
	// Waiting is how many calls of the task still wait for an answer; at 0
	// the task is queued again.
	Waiting int `json:"waiting"`
}

// EventType implements Payload.
func (ToolApprovalAnswered) EventType() Type { return TypeToolApprovalAnswered }

// Event is one stored event of a task's timeline.
type Event struct {
	ID        int64           `json:"id"`
	TaskID    uuid.UUID       `json:"task_id"`
	ProjectID uuid.UUID       `json:"project_id"`
	Seq       int             `json:"seq"`
	Type      Type            `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// Decode returns the typed payload of the event.
func (e Event) Decode() (Payload, error) {
	var p Payload
	switch e.Type {
	case TypeAgentPhase:
		p = &AgentPhase{}
	case TypeToolCall:
		p = &ToolCall{}
	case TypeFileUpdate:
		p = &FileUpdate{}
	case TypeSelfRepair:
		p = &SelfRepair{}
	case TypeLog:
		p = &Log{}
	case TypeError:
		p = &Error{}
	case TypeProgress:
		p = &Progress{}
	case TypeToolApprovalRequested:
		p = &ToolApprovalRequested{}
	case TypeToolApprovalAnswered:
		p = &ToolApprovalAnswered{}
	default:
		return nil, fmt.Errorf("decode event %d: unknown type %q", e.ID, e.Type)
	}
	if err := json.Unmarshal(e.Payload, p); err != nil {
		return nil, fmt.Errorf("decode %s event %d: %w", e.Type, e.ID, err)
	}
	return p, nil
}
