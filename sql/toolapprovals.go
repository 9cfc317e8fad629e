package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Statuses of a tool approval.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
)

// ToolApproval is a tool call a policy made ask: its answer, and once an
// approved call ran, its output.
type ToolApproval struct {
	TaskID     uuid.UUID  `json:"task_id"`
	ToolCallID string     `json:"tool_call_id"`
	ProjectID  uuid.UUID  `json:"project_id"`
	RunID      *uuid.UUID `json:"run_id,omitempty"`
	ToolName   string     `json:"tool_name"`
	Arguments  string     `json:"arguments"`
	// Reason is the reason of the rule that made the call ask.
	Reason     string     `json:"reason,omitempty"`
	Status     string     `json:"status"` // pending | approved | denied
	Message    *string    `json:"message,omitempty"`
	Resolver   *string    `json:"resolver,omitempty"`
	Output     *string    `json:"output,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	AnsweredAt *time.Time `json:"answered_at,omitempty"`
	RanAt      *time.Time `json:"ran_at,omitempty"`
}

const approvalColumns = `task_id, tool_call_id, project_id, run_id, tool_name, arguments, reason, status, message,
	resolver, output, created_at, answered_at, ran_at`

func scanApproval(row pgx.Row) (ToolApproval, error) {
	var a ToolApproval
	err := row.Scan(&a.TaskID, &a.ToolCallID, &a.ProjectID, &a.RunID, &a.ToolName, &a.Arguments, &a.Reason, &a.Status,
		&a.Message, &a.Resolver, &a.Output, &a.CreatedAt, &a.AnsweredAt, &a.RanAt)
	return a, err
}

// RequestToolApprovals records the calls that ask, pending, fenced by the
// task's holder. A call id recorded before (a scripted model repeating
// ids) starts over as pending.
func RequestToolApprovals(ctx context.Context, db DBTX, f Fence, projectID uuid.UUID, runID uuid.UUID, calls []ToolApproval) error {
	ids, names, args, reasons := make([]string, len(calls)), make([]string, len(calls)), make([]string, len(calls)), make([]string, len(calls))
	for i, c := range calls {
		ids[i], names[i], args[i], reasons[i] = c.ToolCallID, c.ToolName, Text(c.Arguments), Text(c.Reason)
	}
	if _, err := fenced(ctx, db, f, `w AS (
			INSERT INTO tool_approvals (task_id, tool_call_id, project_id, run_id, tool_name, arguments, reason)
			SELECT $1, c.id, $3, $4, c.name, c.args, c.reason FROM fence,
				unnest($5::text[], $6::text[], $7::text[], $8::text[]) AS c(id, name, args, reason)
			ON CONFLICT (task_id, tool_call_id) DO UPDATE SET run_id = EXCLUDED.run_id, tool_name = EXCLUDED.tool_name,
				arguments = EXCLUDED.arguments, reason = EXCLUDED.reason, status = 'pending', message = NULL,
				resolver = NULL, output = NULL, created_at = now(), answered_at = NULL, ran_at = NULL
			RETURNING 1)`, projectID, runID, ids, names, args, reasons); err != nil {
		return fmt.Errorf("record the tool calls of task %s that wait for approval: %w", f.TaskID, err)
	}
	return nil
}

// ToolApprovals returns a task's approvals, oldest first.
func ToolApprovals(ctx context.Context, db DBTX, taskID uuid.UUID) ([]ToolApproval, error) {
	rows, err := db.Query(ctx, `SELECT `+approvalColumns+` FROM tool_approvals WHERE task_id = $1 ORDER BY created_at, tool_call_id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list the tool approvals of task %s: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ToolApproval, error) { return scanApproval(row) })
	if err != nil {
		return nil, fmt.Errorf("list the tool approvals of task %s: %w", taskID, err)
	}
	return out, nil
}

// PendingToolApprovals returns a project's calls that wait for an answer,
// oldest first, at most limit.
func PendingToolApprovals(ctx context.Context, db DBTX, projectID uuid.UUID, limit int) ([]ToolApproval, error) {
	rows, err := db.Query(ctx, `SELECT `+approvalColumns+` FROM tool_approvals
		WHERE project_id = $1 AND status = 'pending' ORDER BY created_at, task_id, tool_call_id LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("list the pending tool approvals of project %s: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ToolApproval, error) { return scanApproval(row) })
	if err != nil {
		return nil, fmt.Errorf("list the pending tool approvals of project %s: %w", projectID, err)
	}
	return out, nil
}

// RecordToolOutput keeps what an approved call returned, fenced by the
// task's holder: an attempt after this one gives the model this output
// instead of running the call again.
func RecordToolOutput(ctx context.Context, db DBTX, f Fence, toolCallID, output string) error {
	n, err := fenced(ctx, db, f, `w AS (
			UPDATE tool_approvals SET output = $4, ran_at = now()
			WHERE task_id = $1 AND tool_call_id = $3 AND status = 'approved' AND output IS NULL AND EXISTS (SELECT 1 FROM fence)
			RETURNING 1)`, toolCallID, Text(output))
	if err != nil {
		return fmt.Errorf("record the output of tool call %s of task %s: %w", toolCallID, f.TaskID, err)
	}
	if n == 0 {
		return fmt.Errorf("record the output of tool call %s of task %s: not an approved call without output", toolCallID, f.TaskID)
	}
	return nil
}
