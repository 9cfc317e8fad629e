package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	agentsql "github.com/agentworker/agentworker/sql"
)

// RetentionKind is the River job of the leader's partition and retention
// pass.
const RetentionKind = "agentworker_retention"

// RetentionConfig is what the leader keeps of finished work. The zero value
// keeps everything and only creates agent_events' partitions ahead of time.
type RetentionConfig struct {
	// Events: a day partition of agent_events that ended longer ago than
	// this, whose tasks are all finished, is dropped (after BeforeDrop).
	// A partition holding an event of an unfinished task stays until the
	// task finishes. Defaults to 0: keep every event (serve sets
	// EVENTS_RETENTION, 30 days).
	Events time.Duration
	// Tasks: finished tasks that finished longer ago than this are deleted,
	// with their runs, events, change sets and checkpoints; what they spent
	// stays in the usage views (usage_rollup). Defaults to 0: keep.
	Tasks time.Duration
	// Audit: audit_log rows recorded longer ago than this are deleted, in
	// batches of DeleteBatch. Defaults to 0: keep (serve sets
	// AUDIT_RETENTION, 90 days).
	Audit time.Duration
	// BeforeDrop, if set, is called with the finished tasks that have
	// events in a partition about to be dropped (not called when it holds
	// none): the archive. If it fails, the partition is not dropped this
	// pass. It may be called again for the same tasks on a later pass (the
	// drop failed, or an earlier hook call did), so it must be idempotent.
	BeforeDrop func(ctx context.Context, taskIDs []uuid.UUID) error
	// BeforeDelete, if set, is called with each batch of finished tasks
	// about to be deleted, their rows locked: the archive's objects go
	// first. If it fails, the batch stays. A crash after it leaves the
	// rows, deleted on the next pass, so it must be idempotent.
	BeforeDelete func(ctx context.Context, taskIDs []uuid.UUID) error
	// Interval is how often the leader runs the pass. Defaults to 10 minutes.
	Interval time.Duration
	// PartitionsAhead is how many days after today get their partition
	// ahead of time. Defaults to 3.
	PartitionsAhead int
	// DeleteBatch is how many tasks one transaction deletes. Defaults to 500.
	DeleteBatch int
	// MaxDeleteBatches bounds the batches of one pass; the rest waits for
	// the next. Defaults to 200.
	MaxDeleteBatches int
	// LockTimeout bounds the wait for agent_events' lock when a partition
	// is detached; past it the drop is tried again next pass. Defaults to 2
	// seconds.
	LockTimeout time.Duration
}

func (c RetentionConfig) withDefaults() RetentionConfig {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Minute
	}
	if c.PartitionsAhead <= 0 {
		c.PartitionsAhead = 3
	}
	if c.DeleteBatch <= 0 {
		c.DeleteBatch = 500
	}
	if c.MaxDeleteBatches <= 0 {
		c.MaxDeleteBatches = 200
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 2 * time.Second
	}
	return c
}

// RetentionReport is what one pass did.
type RetentionReport struct {
	// PartitionsCreated counts the day partitions made ahead of time or for
	// events found in the default partition.
	PartitionsCreated int
	// Dropped names the day partitions dropped.
	Dropped []string
	// Kept names the partitions past the retention that stay: an
	// unfinished task's events are in them, or their drop failed.
	Kept []string
	// TasksDeleted counts the finished tasks deleted.
	TasksDeleted int
	// AuditDeleted counts the audit_log rows deleted.
	AuditDeleted int
	// DaySpendDeleted counts the rows of project_day_spend deleted: those
	// of the days before yesterday (UTC), which no daily cap reads.
	DaySpendDeleted int
}

// Retain runs one partition and retention pass: partitions ahead of time,
// then old partitions dropped, then old finished tasks deleted. River's
// leader runs it every RetentionConfig.Interval. An error of one partition
// does not stop the others; the errors are joined.
func (s *Service) Retain(ctx context.Context) (RetentionReport, error) {
	cfg := s.cfg.Retention
	var rep RetentionReport
	var errs []error
	n, err := agentsql.PrepareEventPartitions(ctx, s.pool, cfg.PartitionsAhead)
	rep.PartitionsCreated = n
	if err != nil {
		errs = append(errs, err)
	}
	if cfg.Events > 0 {
		errs = append(errs, s.dropEventPartitions(ctx, time.Now().Add(-cfg.Events), &rep))
	}
	if cfg.Tasks > 0 {
		before := time.Now().Add(-cfg.Tasks)
		n, err := s.inBatches(func(limit int) (int, error) { return s.deleteFinishedTasks(ctx, before, limit) })
		rep.TasksDeleted = n
		errs = append(errs, err)
	}
	if cfg.Audit > 0 {
		before := time.Now().Add(-cfg.Audit)
		n, err := s.inBatches(func(limit int) (int, error) { return agentsql.DeleteAuditBefore(ctx, s.pool, before, limit) })
		rep.AuditDeleted = n
		errs = append(errs, err)
	}
	yesterday := time.Now().UTC().AddDate(0, 0, -1)
	n, err = s.inBatches(func(limit int) (int, error) { return agentsql.DeleteDaySpendBefore(ctx, s.pool, yesterday, limit) })
	rep.DaySpendDeleted = n
	errs = append(errs, err)
	return rep, errors.Join(errs...)
}

// inBatches runs del (a transaction deleting up to its limit) until a
// batch comes short, it fails, or the pass's MaxDeleteBatches are done,
// and returns how many rows it deleted.
func (s *Service) inBatches(del func(limit int) (int, error)) (int, error) {
	cfg := s.cfg.Retention
	total := 0
	for range cfg.MaxDeleteBatches {
		n, err := del(cfg.DeleteBatch)
		total += n
		if err != nil || n < cfg.DeleteBatch {
			return total, err
		}
	}
	return total, nil
}

// dropEventPartitions drops the day partitions that ended before cutoff and
// hold no unfinished task's events, each after BeforeDrop.
func (s *Service) dropEventPartitions(ctx context.Context, cutoff time.Time, rep *RetentionReport) error {
	cfg, log := s.cfg.Retention, s.cfg.Logger
	parts, err := agentsql.EventPartitions(ctx, s.pool)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range parts {
		if p.Day.Add(24 * time.Hour).After(cutoff) {
			break // oldest first: the rest are younger
		}
		finished, unfinished, err := agentsql.PartitionTasks(ctx, s.pool, p.Name)
		if err != nil {
			errs = append(errs, err)
			rep.Kept = append(rep.Kept, p.Name)
			continue
		}
		if len(unfinished) > 0 {
			log.InfoContext(ctx, "event partition kept past its retention: a task with events in it is not finished",
				slog.String("partition", p.Name), slog.Int("unfinished", len(unfinished)), slog.String("task_id", unfinished[0].String()))
			rep.Kept = append(rep.Kept, p.Name)
			continue
		}
		if cfg.BeforeDrop != nil && len(finished) > 0 {
			if err := cfg.BeforeDrop(ctx, finished); err != nil {
				errs = append(errs, fmt.Errorf("before dropping event partition %s (%d tasks): %w", p.Name, len(finished), err))
				rep.Kept = append(rep.Kept, p.Name)
				continue
			}
		}
		dropped, err := agentsql.DropEventPartition(ctx, s.pool, p.Name, finished, cfg.LockTimeout)
		if err != nil {
			errs = append(errs, err)
			rep.Kept = append(rep.Kept, p.Name)
			continue
		}
		if !dropped {
			log.InfoContext(ctx, "event partition kept: one of its tasks went back to work", slog.String("partition", p.Name))
			rep.Kept = append(rep.Kept, p.Name)
			continue
		}
		log.InfoContext(ctx, "event partition dropped", slog.String("partition", p.Name), slog.Int("tasks", len(finished)))
		rep.Dropped = append(rep.Dropped, p.Name)
	}
	return errors.Join(errs...)
}

type retentionArgs struct{}

func (retentionArgs) Kind() string { return RetentionKind }

func (retentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue, MaxAttempts: 1}
}

// retentionWorker runs Retain on River's leader (a periodic job).
type retentionWorker struct {
	river.WorkerDefaults[retentionArgs]
	svc *Service
}

func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[retentionArgs]) error {
	rep, err := w.svc.Retain(ctx)
	if rep.PartitionsCreated > 0 || len(rep.Dropped) > 0 || rep.TasksDeleted > 0 || rep.AuditDeleted > 0 {
		w.svc.cfg.Logger.InfoContext(ctx, "retention pass", slog.Int("partitions_created", rep.PartitionsCreated),
			slog.Int("partitions_dropped", len(rep.Dropped)), slog.Int("partitions_kept", len(rep.Kept)),
			slog.Int("tasks_deleted", rep.TasksDeleted), slog.Int("audit_records_deleted", rep.AuditDeleted))
	}
	return err
}

// Timeout lets a pass that deletes many tasks run past River's default
// minute; each batch is its own transaction.
func (w *retentionWorker) Timeout(*river.Job[retentionArgs]) time.Duration { return time.Hour }

// deleteFinishedTasks deletes one batch of tasks that finished before
// before, after BeforeDelete when it is set.
func (s *Service) deleteFinishedTasks(ctx context.Context, before time.Time, limit int) (int, error) {
	hook := s.cfg.Retention.BeforeDelete
	if hook == nil {
		return agentsql.DeleteFinishedTasks(ctx, s.pool, before, limit)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ids, err := agentsql.LockFinishedTasks(ctx, tx, before, limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := hook(ctx, ids); err != nil {
			return fmt.Errorf("before deleting %d finished tasks: %w", len(ids), err)
		}
		n, err = agentsql.DeleteTasks(ctx, tx, ids)
		return err
	})
	return n, err
}
