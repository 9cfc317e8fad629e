package sql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PlannedTask is a task a plan planned, made its child when the plan
// succeeds.
type PlannedTask struct {
	Key       string     `json:"key"`
	Title     string     `json:"title"`
	Prompt    string     `json:"prompt"`
	Type      TaskType   `json:"type"`
	AgentID   *uuid.UUID `json:"agent_id,omitempty"`
	Priority  int        `json:"priority"`
	DependsOn []string   `json:"depends_on"` // keys of other planned tasks
}

// fencedCode is the SQLSTATE our functions raise for a stale fence.
const fencedCode = "AWFEN"

// QueueExpandPlan queues, in the finish of a plan task, the creation of its
// planned tasks as its children with their dependencies. Under the
// holder's fence f: a stale holder gets ErrFenced and, the pipeline being
// one transaction, creates nothing; a plan that has its children already
// gets no second set. traceParent, the span id of the plan's attempt ("":
// none), becomes each child's trace_parent.
func QueueExpandPlan(p *Pipeline, f Fence, tasks []PlannedTask, traceParent string) error {
	body, err := json.Marshal(tasks)
	if err != nil {
		return fmt.Errorf("expand the plan of task %s: %w", f.TaskID, err)
	}
	p.batch.Queue(`SELECT agentworker_expand_plan($1, $2, $3, $4)`, f.TaskID, f.Epoch, body, traceParent).QueryRow(func(row pgx.Row) error {
		var n int
		err := row.Scan(&n)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == fencedCode {
			return fmt.Errorf("expand the plan of task %s: %w", f.TaskID, ErrFenced)
		}
		if err != nil {
			return fmt.Errorf("expand the plan of task %s into %d tasks: %w", f.TaskID, len(tasks), asRuleError(err))
		}
		return nil
	})
	return nil
}

// TaskInput is the input of one task.
type TaskInput struct {
	ID    uuid.UUID
	Input json.RawMessage
}

// maxTaskDepth bounds the walk up a task's parents.
const maxTaskDepth = 32

// AncestorInputs returns the inputs of the tasks task id is part of: its
// parent's first, then the parent's parent's, up to maxTaskDepth.
func AncestorInputs(ctx context.Context, db DBTX, id uuid.UUID) ([]TaskInput, error) {
	rows, err := db.Query(ctx, `WITH RECURSIVE up(id, parent, input, depth) AS (
			SELECT p.id, p.parent_task_id, p.input, 1 FROM ai_tasks c JOIN ai_tasks p ON p.id = c.parent_task_id WHERE c.id = $1
			UNION ALL
			SELECT p.id, p.parent_task_id, p.input, u.depth + 1 FROM up u JOIN ai_tasks p ON p.id = u.parent WHERE u.depth < $2)
		SELECT id, input FROM up ORDER BY depth`, id, maxTaskDepth)
	if err != nil {
		return nil, fmt.Errorf("read the parents of task %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInput, error) {
		var t TaskInput
		return t, r.Scan(&t.ID, &t.Input)
	})
	if err != nil {
		return nil, fmt.Errorf("read the parents of task %s: %w", id, err)
	}
	return out, nil
}
