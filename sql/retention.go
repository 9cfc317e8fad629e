package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EventPartition is one day partition of agent_events.
type EventPartition struct {
	Name string
	// Day is the UTC day it holds: created_at in [Day, Day+24h).
	Day time.Time
}

// PrepareEventPartitions creates today's partition of agent_events and
// daysAhead more, and one for each day found in the default partition
// (moving its rows there); it returns how many it created. River's leader
// runs it; an insert for a day without a partition lands in the default
// partition meanwhile.
func PrepareEventPartitions(ctx context.Context, db DBTX, daysAhead int) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT agentworker_prepare_event_partitions($1)`, daysAhead).Scan(&n); err != nil {
		return 0, fmt.Errorf("prepare event partitions %d days ahead: %w", daysAhead, err)
	}
	return n, nil
}

// EventPartitions lists the day partitions of agent_events, oldest first.
func EventPartitions(ctx context.Context, db DBTX) ([]EventPartition, error) {
	rows, err := db.Query(ctx, `SELECT name, day FROM agentworker_event_partitions()`)
	if err != nil {
		return nil, fmt.Errorf("list event partitions: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventPartition, error) {
		var p EventPartition
		err := row.Scan(&p.Name, &p.Day)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list event partitions: %w", err)
	}
	return ps, nil
}

// PartitionTasks reads the tasks with events in a day partition: those
// finished (succeeded, failed, blocked, cancelled) and those not.
func PartitionTasks(ctx context.Context, db DBTX, partition string) (finished, unfinished []uuid.UUID, err error) {
	rows, err := db.Query(ctx, `SELECT task_id, finished FROM agentworker_event_partition_tasks($1) ORDER BY task_id`, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("read tasks of event partition %s: %w", partition, err)
	}
	var id uuid.UUID
	var done bool
	_, err = pgx.ForEachRow(rows, []any{&id, &done}, func() error {
		if done {
			finished = append(finished, id)
		} else {
			unfinished = append(unfinished, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read tasks of event partition %s: %w", partition, err)
	}
	return finished, unfinished, nil
}

// DropEventPartition detaches and drops a day partition in one
// transaction, unless one of its tasks is no longer finished or it holds a
// task not in tasks (what PartitionTasks read); dropped reports which.
// Waiting longer than lockTimeout for agent_events' lock (a long reader
// holds it) fails the drop, to be tried again later, rather than queueing
// every writer behind it.
func DropEventPartition(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, partition string, tasks []uuid.UUID, lockTimeout time.Duration) (dropped bool, err error) {
	if tasks == nil {
		tasks = []uuid.UUID{}
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT agentworker_drop_event_partition($1, $2, $3)`, partition, tasks, lockTimeout).Scan(&dropped)
	})
	if err != nil {
		return false, fmt.Errorf("drop event partition %s: %w", partition, err)
	}
	return dropped, nil
}

// DeleteFinishedTasks deletes at most limit tasks that finished before
// before, oldest first, with everything that hangs off them (runs, events,
// change sets, checkpoints, inbox items); what their runs spent stays in
// the usage views through usage_rollup, filled in the same transaction.
func DeleteFinishedTasks(ctx context.Context, db DBTX, before time.Time, limit int) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT agentworker_delete_finished_tasks($1, $2)`, before, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("delete tasks finished before %s: %w", before.Format(time.RFC3339), err)
	}
	return n, nil
}

// LockFinishedTasks locks at most limit tasks that finished before before,
// oldest first, skipping rows another transaction holds, for a delete in
// the same transaction (DeleteTasks).
func LockFinishedTasks(ctx context.Context, tx pgx.Tx, before time.Time, limit int) ([]uuid.UUID, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM ai_tasks
		WHERE status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND coalesce(finished_at, updated_at) < $1
		ORDER BY coalesce(finished_at, updated_at) LIMIT $2 FOR UPDATE SKIP LOCKED`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("lock tasks finished before %s: %w", before.Format(time.RFC3339), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("lock tasks finished before %s: %w", before.Format(time.RFC3339), err)
	}
	return ids, nil
}

// DeleteTasks deletes the tasks ids, locked by LockFinishedTasks in tx,
// with everything that hangs off them, as DeleteFinishedTasks does.
func DeleteTasks(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM ai_tasks WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, fmt.Errorf("delete %d finished tasks: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
}
