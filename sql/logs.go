package sql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// LogQuery filters a project's log events. Zero fields do not filter.
type LogQuery struct {
	TaskID uuid.UUID
	// RunID keeps the log events of the run's task written while the run
	// was open (from its start to its end, or now).
	RunID uuid.UUID
	Level string
	// Text is matched case-insensitively, as a substring of the message.
	Text string
	// Before keeps the events older than this cursor (an event id).
	Before int64
	Limit  int
}

// LogEntry is one log event.
type LogEntry struct {
	ID        int64           `json:"id"`
	TaskID    *uuid.UUID      `json:"task_id,omitempty"`
	Seq       *int            `json:"seq,omitempty"`
	Level     string          `json:"level"`
	Message   string          `json:"message"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// ProjectLogs returns the project's log events matching q, newest first,
// read through agent_events_log_idx. next is the cursor of the page after
// this one (0: none).
func ProjectLogs(ctx context.Context, db DBTX, projectID uuid.UUID, q LogQuery) (entries []LogEntry, next int64, err error) {
	// A task's (or a run's) logs lie in the days from its floor; a project's
	// in every day kept.
	floor := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	task := q.TaskID
	if task == uuid.Nil && q.RunID != uuid.Nil {
		if err := db.QueryRow(ctx, `SELECT coalesce((SELECT task_id FROM task_runs WHERE id = $1), '00000000-0000-0000-0000-000000000000'::uuid)`,
			q.RunID).Scan(&task); err != nil {
			return nil, 0, fmt.Errorf("read logs of run %s in project %s: %w", q.RunID, projectID, err)
		}
	}
	if task != uuid.Nil {
		floors, err := TaskEventFloors(ctx, db, []uuid.UUID{task})
		if err != nil {
			return nil, 0, fmt.Errorf("read logs of project %s: %w", projectID, err)
		}
		floor = floors[0].at
	}
	query, args := projectLogsStatement(projectID, q, floor)
	rows, err := db.Query(ctx, query, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("read logs of project %s: %w", projectID, err)
	}
	entries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (LogEntry, error) {
		var e LogEntry
		var meta []byte
		err := row.Scan(&e.ID, &e.TaskID, &e.Seq, &e.Level, &e.Message, &meta, &e.CreatedAt)
		if len(meta) > 0 && string(meta) != "null" {
			e.Metadata = meta
		}
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read logs of project %s: %w", projectID, err)
	}
	if len(entries) == q.Limit && q.Limit > 0 {
		next = entries[len(entries)-1].ID
	}
	return entries, next, nil
}

// projectLogsStatement is ProjectLogs's query. Its WHERE repeats the
// index's predicate (type = 'log') so the planner can use the index.
// The read runs unprepared: floor prunes the days only in a plan made with
// its value.
func projectLogsStatement(projectID uuid.UUID, q LogQuery, floor pgtype.Timestamptz) (string, []any) {
	like := ""
	if q.Text != "" {
		like = "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q.Text) + "%"
	}
	return `SELECT e.id, e.task_id, e.seq, coalesce(e.payload ->> 'level', ''), coalesce(e.payload ->> 'message', ''),
			e.payload -> 'metadata', e.created_at
		FROM agent_events e
		WHERE e.project_id = $1 AND e.type = 'log'
		  AND ($2::uuid IS NULL OR e.task_id = $2)
		  AND ($3::uuid IS NULL OR EXISTS (
		      SELECT 1 FROM task_runs r
		      WHERE r.id = $3 AND r.task_id = e.task_id
		        AND e.created_at >= r.created_at AND e.created_at <= coalesce(r.finished_at, 'infinity')))
		  AND ($4 = '' OR e.payload ->> 'level' = $4)
		  AND ($5 = '' OR e.payload ->> 'message' ILIKE $5)
		  AND ($6::bigint = 0 OR e.id < $6::bigint)
		  AND e.created_at >= $8
		ORDER BY e.id DESC
		LIMIT $7::integer`,
		[]any{projectID, nullUUID(q.TaskID), nullUUID(q.RunID), q.Level, like, q.Before, q.Limit, floor}
}

func nullUUID(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}
