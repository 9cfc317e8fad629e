package sql

import (
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
// gets no second set.
func QueueExpandPlan(p *Pipeline, f Fence, tasks []PlannedTask) error {
	body, err := json.Marshal(tasks)
	if err != nil {
		return fmt.Errorf("expand the plan of task %s: %w", f.TaskID, err)
	}
	p.batch.Queue(`SELECT agentworker_expand_plan($1, $2, $3)`, f.TaskID, f.Epoch, body).QueryRow(func(row pgx.Row) error {
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
