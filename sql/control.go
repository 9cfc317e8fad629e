package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var (
	// ErrVersionConflict reports a control action whose expected version is stale.
	ErrVersionConflict = errors.New("task version conflict")
	// ErrInvalidAction reports an unknown action, or an answer without text.
	ErrInvalidAction = errors.New("invalid control action")
)

// Action is a control action on a task: what a person or an app does to
// steer it. Each is a SQL function (agentworker_<action>_task, and
// agentworker_answer_input) and an HTTP endpoint.
type Action string

// Control actions.
const (
	ActionCancel Action = "cancel"
	ActionPause  Action = "pause"
	ActionResume Action = "resume"
	ActionRetry  Action = "retry"
	ActionAnswer Action = "answer"
	// ActionApprove: a task in review is queued for a worker to apply its
	// staged change set.
	ActionApprove Action = "approve"
	// ActionReject: a task in review goes on with the feedback (ControlOpts.
	// Answer), or without feedback is cancelled and its change set discarded.
	ActionReject Action = "reject"
	// ActionApproveCall approves one tool call (ControlOpts.ToolCallID) of
	// a task awaiting approval: it runs when the task goes on.
	ActionApproveCall Action = "approve_call"
	// ActionDenyCall denies one tool call; the model reads ControlOpts.
	// Answer (optional) as its failed result.
	ActionDenyCall Action = "deny_call"
)

// Actions lists every control action.
var Actions = []Action{ActionCancel, ActionPause, ActionResume, ActionRetry, ActionAnswer, ActionApprove, ActionReject,
	ActionApproveCall, ActionDenyCall}

// Statuses lists every task status.
var Statuses = []Status{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusBlocked,
	StatusCancelled, StatusPaused, StatusAwaitingInput, StatusReview, StatusAwaitingApproval}

// Target is the status an action moves a task to.
func (a Action) Target() Status {
	switch a {
	case ActionCancel:
		return StatusCancelled
	case ActionPause:
		return StatusPaused
	case ActionResume, ActionRetry, ActionAnswer, ActionApprove, ActionReject, ActionApproveCall, ActionDenyCall:
		// A reject without feedback cancels instead; the answer to a call
		// while others still wait leaves the task awaiting approval.
		return StatusQueued
	}
	return ""
}

// Permits reports whether the action may be taken on a task in status from:
// the move must be legal (CanTransition) and start where the action applies
// (resume only a paused task, answer only one awaiting input, retry only an
// ended one). agentworker_control_task applies the same rule.
func (a Action) Permits(from Status) bool {
	var ok bool
	switch a {
	case ActionCancel:
		ok = from == StatusQueued || from == StatusRunning || from == StatusPaused || from == StatusAwaitingInput || from == StatusReview ||
			from == StatusAwaitingApproval
	case ActionPause:
		ok = from == StatusQueued || from == StatusRunning
	case ActionResume:
		ok = from == StatusPaused
	case ActionRetry:
		ok = from == StatusFailed || from == StatusBlocked || from == StatusCancelled
	case ActionAnswer:
		ok = from == StatusAwaitingInput
	case ActionApprove, ActionReject:
		ok = from == StatusReview
	case ActionApproveCall, ActionDenyCall:
		ok = from == StatusAwaitingApproval
	}
	return ok && CanTransition(from, a.Target())
}

// ControlOpts qualifies a control action.
type ControlOpts struct {
	// ExpectedVersion, when set, must equal the task's version or the
	// action is refused with ErrVersionConflict.
	ExpectedVersion *int
	// Actor names who acts, for the audit event. Defaults to the database user.
	Actor string
	// Answer is the reply to the agent's question; required by ActionAnswer.
	// With ActionDenyCall, the message the model reads (optional).
	Answer string
	// ToolCallID is the call ActionApproveCall and ActionDenyCall answer.
	ToolCallID string
	// Children, with ActionRetry, also retries the task's children that a
	// cancel left cancelled, and theirs (ControlResult.Children).
	Children bool
}

// ControlResult is what agentworker_control_task returns.
type ControlResult struct {
	Outcome string    `json:"outcome"` // applied | rejected | conflict | invalid | not_found
	TaskID  uuid.UUID `json:"task_id"`
	Action  Action    `json:"action"`
	From    Status    `json:"from,omitempty"`
	Status  Status    `json:"status,omitempty"`
	Version int       `json:"version,omitempty"`
	Error   string    `json:"error,omitempty"`
	// Pending is set when a pause of a running task was requested: the
	// task stays running until its loop reaches the next iteration boundary.
	Pending bool `json:"pending,omitempty"`
	// ToolCallID is the call an approve_call or deny_call answered, and
	// Waiting the calls of the task that still wait for an answer.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Waiting    int    `json:"waiting,omitempty"`
	// Children are the results of retrying the task's cancelled children
	// (ControlOpts.Children).
	Children []ControlResult `json:"children,omitempty"`
}

// ControlError is a refused control action. It wraps ErrIllegalTransition,
// ErrVersionConflict, ErrInvalidAction or ErrTaskNotFound.
type ControlError struct {
	Result ControlResult
	kind   error
}

func (e *ControlError) Error() string {
	return fmt.Sprintf("%s task %s: %s", e.Result.Action, e.Result.TaskID, e.Result.Error)
}

func (e *ControlError) Unwrap() error { return e.kind }

// ControlTask applies a control action through agentworker_control_task,
// the one implementation apps reach through PostgREST too. The audit event
// is written whatever the outcome; a refused action returns a *ControlError.
//
// An applied action's From is the status the task was in, read in the same
// statement under the row's lock before the function runs, so no other
// move comes between (agentworker_control_task answers no from then).
func ControlTask(ctx context.Context, db DBTX, id uuid.UUID, action Action, o ControlOpts) (ControlResult, error) {
	if o.Children && action != ActionRetry {
		return ControlResult{}, fmt.Errorf("%s task %s with its children: %w", action, id, ErrInvalidAction)
	}
	call, args := `agentworker_control_task($1, $2, $3, nullif($4, ''), nullif($5, ''), nullif($6, ''))`,
		[]any{id, string(action), o.ExpectedVersion, o.Actor, o.Answer, o.ToolCallID}
	if o.Children {
		call, args = `agentworker_retry_with_children($1, $2, nullif($3, ''))`, []any{id, o.ExpectedVersion, o.Actor}
	}
	var raw []byte
	var from *string
	// The join makes the locked row's scan come before the select list,
	// where the function runs.
	if err := db.QueryRow(ctx, `WITH locked AS MATERIALIZED (SELECT status FROM ai_tasks WHERE id = $1 FOR UPDATE)
		SELECT l.status, `+call+` FROM (SELECT 1) one LEFT JOIN locked l ON true`, args...).Scan(&from, &raw); err != nil {
		return ControlResult{}, fmt.Errorf("%s task %s: %w", action, id, err)
	}
	var res ControlResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return ControlResult{}, fmt.Errorf("%s task %s: decode result %s: %w", action, id, raw, err)
	}
	if res.From == "" && from != nil {
		res.From = Status(*from)
	}
	var kind error
	switch res.Outcome {
	case "applied":
		return res, nil
	case "rejected":
		kind = ErrIllegalTransition
	case "conflict":
		kind = ErrVersionConflict
	case "invalid":
		kind = ErrInvalidAction
	case "not_found":
		kind = ErrTaskNotFound
	default:
		return res, fmt.Errorf("%s task %s: unexpected outcome %q", action, id, res.Outcome)
	}
	return res, &ControlError{Result: res, kind: kind}
}

// CanTransitionSQL asks the database's state machine table whether a task
// status move is legal; sql.CanTransition must agree.
func CanTransitionSQL(ctx context.Context, db DBTX, from, to Status) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agentworker_task_transitions
		WHERE from_status = $1 AND to_status = $2)`, from, to).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up task transition %s -> %s: %w", from, to, err)
	}
	return ok, nil
}

// PauseRequested reports whether a pause of the running task was requested.
func PauseRequested(ctx context.Context, db DBTX, taskID uuid.UUID) (bool, error) {
	var p bool
	if err := db.QueryRow(ctx, `SELECT pause_requested FROM ai_tasks WHERE id = $1`, taskID).Scan(&p); err != nil {
		return false, fmt.Errorf("read pause request of task %s: %w", taskID, err)
	}
	return p, nil
}

// BroadcastOpts chooses the tasks of a broadcast and qualifies it.
type BroadcastOpts struct {
	// Statuses targets the project's tasks in these statuses. With neither
	// Statuses nor TaskIDs, the project's running tasks.
	Statuses []Status
	// TaskIDs targets these tasks (with Statuses, those of them in one of
	// the statuses); an id not in the project is answered not_found.
	TaskIDs []uuid.UUID
	// ExpectedVersions holds, per task, the version it must be at.
	ExpectedVersions map[uuid.UUID]int
	// Actor names who acts, for the audit events. Defaults to the database user.
	Actor string
	// BatchSize is how many tasks one transaction takes (and locks) at
	// most. Defaults to 500.
	BatchSize int
}

// BroadcastCommands lists the actions a broadcast applies.
var BroadcastCommands = []Action{ActionPause, ActionResume, ActionCancel, ActionRetry}

// Broadcast applies action to a project's tasks through agentworker_broadcast,
// each task through agentworker_control_task, a batch per transaction, and
// returns every task's result in id order. A refused task is a result
// (rejected, conflict, not_found), not an error.
func Broadcast(ctx context.Context, db DBTX, projectID uuid.UUID, action Action, o BroadcastOpts) ([]ControlResult, error) {
	if !slices.Contains(BroadcastCommands, action) {
		return nil, fmt.Errorf("broadcast %q to project %s: %w", action, projectID, ErrInvalidAction)
	}
	batch := o.BatchSize
	if batch <= 0 {
		batch = 500
	}
	var statuses []string
	for _, s := range o.Statuses {
		statuses = append(statuses, string(s))
	}
	var versions map[string]int
	if len(o.ExpectedVersions) > 0 {
		versions = make(map[string]int, len(o.ExpectedVersions))
		for id, v := range o.ExpectedVersions {
			versions[id.String()] = v
		}
	}
	var (
		out   []ControlResult
		after *uuid.UUID
	)
	for {
		rows, err := db.Query(ctx, `SELECT r FROM agentworker_broadcast($1, $2, $3, $4, $5, nullif($6, ''), $7, $8) AS r`,
			string(action), projectID, statuses, o.TaskIDs, versions, o.Actor, after, batch)
		if err != nil {
			return out, fmt.Errorf("broadcast %s to project %s: %w", action, projectID, err)
		}
		page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ControlResult, error) {
			var raw []byte
			if err := row.Scan(&raw); err != nil {
				return ControlResult{}, err
			}
			var res ControlResult
			if err := json.Unmarshal(raw, &res); err != nil {
				return ControlResult{}, fmt.Errorf("decode result %s: %w", raw, err)
			}
			return res, nil
		})
		if err != nil {
			return out, fmt.Errorf("broadcast %s to project %s: %w", action, projectID, err)
		}
		out = append(out, page...)
		if len(page) < batch {
			return out, nil
		}
		after = &page[len(page)-1].TaskID
	}
}
