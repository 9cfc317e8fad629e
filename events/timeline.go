package events

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// Archive reads the part of a task's timeline that was moved out of
// agent_events into object storage (package archive). A task archived
// through seq n has its events up to n in the archive; its later events,
// and until they are dropped its earlier ones too, are rows.
type Archive interface {
	// ReadArchived calls fn with the task's archived events with seq >
	// after, in seq order, stopping at fn's first error, and returns the
	// last seq the archive holds for the task (0 when it has none).
	ReadArchived(ctx context.Context, taskID uuid.UUID, after int, fn func(Event) error) (through int, err error)
}

// ReadTimeline calls fn with a task's events with seq > after, in seq
// order, batch rows a query, and returns the seq of the last event fn was
// given (after when none). With arch set, events that are no longer rows
// are read from the archive: the archive is asked only when the table does
// not continue the cursor (no row, or the first row is past after+1), so
// reading a live task costs no more than before. Rows are dropped only once
// archived, and the archive mark only grows: a reader that finds the table
// short finds the archive marked.
func ReadTimeline(ctx context.Context, db agentsql.DBTX, arch Archive, taskID uuid.UUID, after, batch int, fn func(Event) error) (int, error) {
	asked := arch == nil
	for {
		rows, err := agentsql.TaskEventsAfter(ctx, db, taskID, after, batch)
		if err != nil {
			return after, err
		}
		if !asked && (len(rows) == 0 || *rows[0].Seq != after+1) {
			asked = true
			from := after
			through, err := arch.ReadArchived(ctx, taskID, after, func(ev Event) error {
				if err := fn(ev); err != nil {
					return err
				}
				after = ev.Seq
				return nil
			})
			if err != nil {
				return after, fmt.Errorf("read archived events of task %s after seq %d: %w", taskID, from, err)
			}
			if through > from {
				continue // the rows after the archive
			}
		}
		for _, row := range rows {
			ev := FromRow(row)
			if err := fn(ev); err != nil {
				return after, err
			}
			after = ev.Seq
		}
		if len(rows) < batch {
			return after, nil
		}
	}
}
