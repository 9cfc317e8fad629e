// Package archive moves finished tasks' timelines out of agent_events into
// object storage and reads them back. A task's archive is one
// gzip-compressed JSONL object: one event a line, in seq order, each line
// the JSON the events API serves (id, task_id, project_id, seq, type,
// payload, created_at), at a key made of the task's project and id under
// the archive prefix ("_archive/<project_id>/<task_id>.jsonl.gz"). The
// prefix starts with an underscore, which no project id may
// (storage.CheckServiceKey): no project path names an archive and no
// project listing shows one, so the agent's tools cannot reach it.
//
// Archiving writes the object first and marks the task row after
// (ai_tasks.events_archive_key, events_archived_seq, events_archived_at),
// under a per-task lock: a crash in between leaves the mark as it was, the
// rows stay, and a re-run writes the same key again. A task retried after it was archived gets new events; its next
// archive is the old one followed by the new rows.
//
// Reading (ReadArchived, the events.Archive the SSE streams and
// events.FollowArchived use) takes seq <= events_archived_seq from the
// object and the rest from agent_events, streaming: memory holds one event
// and the decompressor's window, whatever the archive's size; a cursor deep
// into an archive costs decompressing what precedes it (gzip cannot seek).
package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// DefaultPrefix is Config.Prefix's default.
const DefaultPrefix = "_archive/"

// Config configures an Archiver.
type Config struct {
	// Prefix is the key prefix of every archive in the bucket
	// (ARCHIVE_PREFIX). It must start with "_" and end with "/", so that it
	// lies outside every project's files (storage.CheckServiceKey).
	// Defaults to DefaultPrefix.
	Prefix string
	// TempDir is where an archive is written before its upload, so that a
	// long timeline is never held in memory. Defaults to os.TempDir().
	TempDir string
	// Batch is the most event rows read per query. Defaults to 500.
	Batch int
	// Concurrency is how many tasks ArchiveTasks archives at once, each
	// holding a database connection through its upload. Defaults to 4.
	Concurrency int
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Archiver archives timelines into the service objects of an S3 store and
// reads them back.
type Archiver struct {
	pool  *pgxpool.Pool
	store *storage.S3
	cfg   Config
	// afterPut, when set (tests), runs between the object's upload and the
	// mark: an error there is a crash at the worst moment.
	afterPut func(taskID uuid.UUID) error
}

var _ events.Archive = (*Archiver)(nil)

// New returns an Archiver over pool (the worker's own connection: the mark
// is the worker's write) and store.
func New(pool *pgxpool.Pool, store *storage.S3, cfg Config) (*Archiver, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("new archiver: prefix %q must end with \"/\"", cfg.Prefix)
	}
	if err := storage.CheckServiceKey(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("new archiver: prefix outside the projects' files: %w", err)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Archiver{pool: pool, store: store, cfg: cfg}, nil
}

// Key is the object key of a task's archive.
func (a *Archiver) Key(projectID, taskID uuid.UUID) string {
	return a.cfg.Prefix + projectID.String() + "/" + taskID.String() + ".jsonl.gz"
}

var (
	// ErrUnfinished reports tasks not archived because they have not
	// finished (their status is not terminal): their timeline still grows.
	ErrUnfinished = errors.New("task not finished")
	// ErrCorrupt reports an archive that does not hold what its task's row
	// says it does: it ends early, is out of order or names another task.
	ErrCorrupt = errors.New("archive does not match its task")
)

// UnfinishedError lists the tasks ArchiveTasks left alone because they have
// not finished. errors.Is(err, ErrUnfinished) is true.
type UnfinishedError struct {
	Tasks []uuid.UUID
}

func (e *UnfinishedError) Error() string {
	ids := make([]string, len(e.Tasks))
	for i, id := range e.Tasks {
		ids[i] = id.String()
	}
	return fmt.Sprintf("%d tasks not archived, not finished: %s", len(e.Tasks), strings.Join(ids, ", "))
}

// Is makes errors.Is(err, ErrUnfinished) true.
func (e *UnfinishedError) Is(target error) bool { return target == ErrUnfinished }

// ArchiveTasks archives the timeline of each finished task (succeeded,
// failed, blocked or cancelled) through its last event, one task at a
// time, Config.Concurrency at once. It is idempotent: a task archived
// through its last event is left alone, one with newer events (retried
// since) gets its archive rewritten with them. A task that no longer
// exists is skipped. Tasks that have not finished are not archived: once
// the rest are, the error is an *UnfinishedError listing them, so a caller
// about to drop their rows keeps them. Any other failure stops the work
// and is returned; the tasks archived by then stay archived.
func (a *Archiver) ArchiveTasks(ctx context.Context, taskIDs []uuid.UUID) error {
	var (
		mu         sync.Mutex
		unfinished []uuid.UUID
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.cfg.Concurrency)
	for _, id := range taskIDs {
		g.Go(func() error {
			err := a.archiveTask(gctx, id)
			switch {
			case errors.Is(err, ErrUnfinished):
				mu.Lock()
				unfinished = append(unfinished, id)
				mu.Unlock()
			case errors.Is(err, agentsql.ErrTaskNotFound):
			case err != nil:
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if len(unfinished) > 0 {
		slices.SortFunc(unfinished, compareIDs)
		return &UnfinishedError{Tasks: unfinished}
	}
	return nil
}

func compareIDs(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) }

// archiveTask archives one task under its archiving lock: the old
// archive's events through the marked seq, then the rows after it, to a
// temporary file, uploaded, then marked. Rows that commit meanwhile (the
// task was retried since the status was read) have later seqs than those
// read (a task's seq order is its commit order): they stay rows, after the
// mark.
func (a *Archiver) archiveTask(ctx context.Context, taskID uuid.UUID) error {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	st, err := agentsql.LockTaskArchive(ctx, tx, taskID)
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	if !st.Status.Terminal() {
		return fmt.Errorf("archive task %s (%s): %w", taskID, st.Status, ErrUnfinished)
	}
	rows, err := agentsql.TaskEventsAfter(ctx, tx, taskID, st.Seq, a.cfg.Batch)
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	if len(rows) == 0 {
		return nil // archived through its last event, or it has none
	}
	key := a.Key(st.ProjectID, taskID)
	f, err := os.CreateTemp(a.cfg.TempDir, "agentworker-archive-*.jsonl.gz")
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	last, err := a.write(ctx, tx, f, st, rows)
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	if _, err := a.store.PutService(ctx, key, f, size); err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	if a.afterPut != nil {
		if err := a.afterPut(taskID); err != nil {
			return fmt.Errorf("archive task %s: %w", taskID, err)
		}
	}
	if err := agentsql.MarkTaskArchived(ctx, tx, taskID, key, st.Seq, last); err != nil {
		return fmt.Errorf("archive task %s: %w", taskID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("archive task %s: commit the mark: %w", taskID, err)
	}
	if st.Key != "" && st.Key != key {
		// Archived under another prefix before: the new object holds it all.
		if err := a.store.RemoveService(ctx, st.Key); err != nil {
			a.cfg.Logger.WarnContext(ctx, "archive: old object not removed", slog.String("task_id", taskID.String()),
				slog.String("key", st.Key), slog.String("err", err.Error()))
		}
	}
	a.cfg.Logger.DebugContext(ctx, "archived task", slog.String("task_id", taskID.String()),
		slog.String("key", key), slog.Int("through_seq", last), slog.Int64("bytes", size))
	return nil
}

// write writes the task's archive to w: the old archive's lines through
// st.Seq as they are, then first and the rows after it. It returns the
// last seq written.
func (a *Archiver) write(ctx context.Context, tx pgx.Tx, w io.Writer, st agentsql.TaskArchive, first []agentsql.EventRow) (int, error) {
	zw := gzip.NewWriter(w)
	bw := bufio.NewWriterSize(zw, 64<<10)
	last := 0
	if st.Key != "" && st.Seq > 0 {
		err := a.scan(ctx, st, 0, func(line []byte, ev events.Event) error {
			last = ev.Seq
			_, err := bw.Write(line)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("copy the archive through seq %d: %w", st.Seq, err)
		}
	}
	rows := first
	for len(rows) > 0 {
		for _, row := range rows {
			line, err := json.Marshal(events.FromRow(row))
			if err != nil {
				return 0, fmt.Errorf("encode event %d: %w", row.ID, err)
			}
			_, _ = bw.Write(line)
			if err := bw.WriteByte('\n'); err != nil {
				return 0, fmt.Errorf("write event %d: %w", row.ID, err)
			}
			last = *row.Seq
		}
		if len(rows) < a.cfg.Batch {
			break
		}
		var err error
		if rows, err = agentsql.TaskEventsAfter(ctx, tx, st.TaskID, last, a.cfg.Batch); err != nil {
			return 0, err
		}
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	if err := zw.Close(); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	return last, nil
}

// ReadArchived implements events.Archive: the task's archived events with
// seq > after, streamed from its object, through the seq its row marks.
// A task without an archive (or that does not exist) has none.
func (a *Archiver) ReadArchived(ctx context.Context, taskID uuid.UUID, after int, fn func(events.Event) error) (int, error) {
	st, err := agentsql.ReadTaskArchive(ctx, a.pool, taskID)
	if errors.Is(err, agentsql.ErrTaskNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if st.Key == "" || st.Seq <= after {
		return st.Seq, nil
	}
	err = a.scan(ctx, st, after, func(_ []byte, ev events.Event) error { return fn(ev) })
	return st.Seq, err
}

// scan streams the task's archive and calls fn with each event with
// after < seq <= st.Seq and its line (newline included). The object must
// be the task's (its key ends in the task's own name), its lines in
// increasing seq order, and it must reach st.Seq: otherwise ErrCorrupt.
func (a *Archiver) scan(ctx context.Context, st agentsql.TaskArchive, after int, fn func(line []byte, ev events.Event) error) error {
	if !strings.HasSuffix(st.Key, "/"+st.ProjectID.String()+"/"+st.TaskID.String()+".jsonl.gz") {
		return fmt.Errorf("archive %q of task %s in project %s: not the task's key: %w", st.Key, st.TaskID, st.ProjectID, ErrCorrupt)
	}
	body, _, err := a.store.OpenService(ctx, st.Key)
	if err != nil {
		return fmt.Errorf("read archive of task %s: %w", st.TaskID, err)
	}
	defer body.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(body, 64<<10))
	if err != nil {
		return fmt.Errorf("read archive %q: %w", st.Key, err)
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	last := 0
	for last < st.Seq {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			// The key first: a line before the cursor is only checked.
			var key struct {
				TaskID uuid.UUID `json:"task_id"`
				Seq    int       `json:"seq"`
			}
			if jerr := json.Unmarshal(line, &key); jerr != nil {
				return fmt.Errorf("read archive %q after seq %d: %w: %w", st.Key, last, ErrCorrupt, jerr)
			}
			if key.TaskID != st.TaskID || key.Seq <= last {
				return fmt.Errorf("read archive %q: event seq %d of task %s after seq %d: %w", st.Key, key.Seq, key.TaskID, last, ErrCorrupt)
			}
			last = key.Seq
			if key.Seq > st.Seq {
				break // written by a run whose mark did not commit
			}
			if key.Seq > after {
				var ev events.Event
				if jerr := json.Unmarshal(line, &ev); jerr != nil {
					return fmt.Errorf("read archive %q at seq %d: %w: %w", st.Key, key.Seq, ErrCorrupt, jerr)
				}
				if err := fn(line, ev); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive %q after seq %d: %w", st.Key, last, err)
		}
	}
	if last < st.Seq {
		return fmt.Errorf("read archive %q: ends at seq %d, marked through %d: %w", st.Key, last, st.Seq, ErrCorrupt)
	}
	return nil
}

// DeleteArchives removes the archives of the tasks, for a caller about to
// delete the tasks themselves (retention): call it first, then delete the
// rows. An archive already gone is no error, so a run interrupted between
// the two is repeated whole. Tasks without an archive are skipped.
func (a *Archiver) DeleteArchives(ctx context.Context, taskIDs []uuid.UUID) error {
	keys, err := agentsql.ArchivedTaskKeys(ctx, a.pool, taskIDs)
	if err != nil {
		return fmt.Errorf("delete archives: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareIDs)
	for _, id := range ids {
		if err := a.store.RemoveService(ctx, keys[id]); err != nil {
			return fmt.Errorf("delete archive of task %s: %w", id, err)
		}
	}
	return nil
}
