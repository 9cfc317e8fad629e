package sql

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EventsChannel is the NOTIFY channel of agent_events. Its payload is the
// small key {"id", "task_id", "project_id", "seq", "type"}, never content.
const EventsChannel = "agent_events"

// EventRow is one agent_events row.
type EventRow struct {
	ID        int64
	TaskID    *uuid.UUID
	ProjectID uuid.UUID
	Seq       *int
	Type      string
	Payload   json.RawMessage
	CreatedAt time.Time
}

// NewEvent is an event to append; seq is assigned by the database.
type NewEvent struct {
	Type    string
	Payload json.RawMessage
}

const eventColumns = `id, task_id, project_id, seq, type, payload, created_at`

func scanEvents(rows pgx.Rows) ([]EventRow, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventRow, error) {
		var e EventRow
		err := row.Scan(&e.ID, &e.TaskID, &e.ProjectID, &e.Seq, &e.Type, &e.Payload, &e.CreatedAt)
		return e, err
	})
}

// InsertEvents appends events to a task's timeline in one statement, in
// order. The agent_events_assign_seq trigger gives each its seq under the task
// row lock, and agent_events_notify announces each one.
func InsertEvents(ctx context.Context, db DBTX, taskID, projectID uuid.UUID, evs []NewEvent) ([]EventRow, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	types := make([]string, len(evs))
	payloads := make([]string, len(evs))
	for i, e := range evs {
		types[i] = e.Type
		payloads[i] = string(e.Payload)
	}
	rows, err := db.Query(ctx, `INSERT INTO agent_events (task_id, project_id, type, payload)
		SELECT $1, $2, e.type, e.payload::jsonb
		FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS e(type, payload, ord)
		ORDER BY e.ord
		RETURNING `+eventColumns, taskID, projectID, types, payloads)
	if err != nil {
		return nil, fmt.Errorf("insert %d events for task %s: %w", len(evs), taskID, err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("insert %d events for task %s: %w", len(evs), taskID, err)
	}
	return out, nil
}

// TaskEventsAfter returns a task's events with seq > afterSeq, in seq order.
// Per-task seq order is commit order (seq is taken under the task row lock),
// so a reader that advances its cursor to the last seq it saw never skips one.
func TaskEventsAfter(ctx context.Context, db DBTX, taskID uuid.UUID, afterSeq, limit int) ([]EventRow, error) {
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM agent_events
		WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, taskID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of task %s after seq %d: %w", taskID, afterSeq, err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read events of task %s after seq %d: %w", taskID, afterSeq, err)
	}
	return out, nil
}
