package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// TasksMDKind is the River job kind of the tasks.md renderer.
const TasksMDKind = "ai_task_tasks_md"

// How much of a project a tasks.md lists: every unfinished task up to the
// first bound, the most recently finished up to the second; the counts
// cover all of them.
const (
	tasksMDMaxOpen = 1000
	tasksMDMaxDone = 200
)

// boardOrder is the order of the statuses in a tasks.md: what moves first.
var boardOrder = []agentsql.Status{
	agentsql.StatusRunning, agentsql.StatusQueued, agentsql.StatusWaiting, agentsql.StatusReview, agentsql.StatusAwaitingInput,
	agentsql.StatusPaused, agentsql.StatusBlocked, agentsql.StatusFailed, agentsql.StatusSucceeded, agentsql.StatusCancelled,
}

type tasksMDArgs struct{}

func (tasksMDArgs) Kind() string { return TasksMDKind }

// InsertOpts: one job queued or running at a time, whichever replica
// inserts it.
func (tasksMDArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
}

// tasksMDWorker rewrites the tasks.md of every project whose tasks changed
// status since it last ran. Inserted when events were announced
// (scheduleTasksMD); a burst of changes in a project between two runs is
// one write, and a run that finds another still at work leaves the
// changes to it.
type tasksMDWorker struct {
	river.WorkerDefaults[tasksMDArgs]
	svc *Service
}

func (w *tasksMDWorker) Work(ctx context.Context, _ *river.Job[tasksMDArgs]) error {
	n, err := w.svc.RenderTasksMD(ctx)
	if n > 0 {
		w.svc.cfg.Logger.DebugContext(ctx, "tasks.md rewritten", slog.Int("projects", n))
	}
	return err
}

const (
	tasksMDMinBackoff = 100 * time.Millisecond
	tasksMDMaxBackoff = 5 * time.Second
)

// scheduleTasksMD inserts the tasks.md job once events were announced on
// agent_events (every status change writes one), at most once an interval,
// until ctx ends: a service whose projects do not change runs none. It
// also inserts one whenever it starts to listen, for the changes made
// while it did not.
func (s *Service) scheduleTasksMD(ctx context.Context) {
	changed := make(chan struct{}, 1)
	mark := func() {
		select {
		case changed <- struct{}{}:
		default: // already marked
		}
	}
	var listening sync.WaitGroup
	defer listening.Wait()
	listening.Go(func() { s.listenForChanges(ctx, mark) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		// The changes of one interval are one job.
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.TasksMDInterval):
		}
		res, err := s.client.Insert(ctx, tasksMDArgs{}, nil)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.cfg.Logger.WarnContext(ctx, "insert the tasks.md job; retrying", slog.String("err", err.Error()))
			mark()
		case res.UniqueSkippedAsDuplicate:
			// A job is queued or running: the running one may have read
			// its changes before these committed, so one more follows it.
			mark()
		}
	}
}

// listenForChanges calls mark after each notification on agent_events,
// and once it listens (again), until ctx ends.
func (s *Service) listenForChanges(ctx context.Context, mark func()) {
	backoff := tasksMDMinBackoff
	for {
		err := s.listenOnce(ctx, mark)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.WarnContext(ctx, "tasks.md: listener connection lost; reconnecting", slog.String("err", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, tasksMDMaxBackoff)
	}
}

func (s *Service) listenOnce(ctx context.Context, mark func()) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listener connection: %w", err)
	}
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		return fmt.Errorf("listen %s: %w", agentsql.EventsChannel, err)
	}
	mark()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		mark()
	}
}

// RenderTasksMD rewrites the tasks.md of every project whose tasks changed
// status since the last render and returns how many it wrote. The renders
// and the cursor move in one transaction: a failed write leaves the
// changes for the next run, and renderers take turns, so an older view
// never overwrites a newer one.
func (s *Service) RenderTasksMD(ctx context.Context) (int, error) {
	written := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		projects, ok, err := agentsql.ChangedTaskBoards(ctx, tx)
		if err != nil || !ok {
			return err
		}
		for _, project := range projects {
			board, err := agentsql.ReadTaskBoard(ctx, tx, project, tasksMDMaxOpen, tasksMDMaxDone)
			if err != nil {
				return err
			}
			content := []byte(RenderTaskBoard(board))
			id := project.String()
			old, _, err := s.cfg.TasksMD.Store.Read(ctx, id, s.cfg.TasksMD.Path)
			if err == nil && bytes.Equal(old, content) {
				continue
			}
			if _, err := s.cfg.TasksMD.Store.Write(ctx, id, s.cfg.TasksMD.Path, content); err != nil {
				return fmt.Errorf("write %s of project %s: %w", s.cfg.TasksMD.Path, id, err)
			}
			written++
		}
		return nil
	})
	return written, err
}

// RenderTaskBoard is a project's tasks.md: the counts by status, then each
// task with its short id, title, status, priority, agent, dependencies and,
// once finished, its result.
func RenderTaskBoard(b agentsql.TaskBoard) string {
	var sb strings.Builder
	sb.WriteString("# Tasks\n\n")
	sb.WriteString("<!-- Written by agentworker whenever a task of this project changes status; edits here are overwritten. -->\n\n")
	total := 0
	for _, n := range b.Counts {
		total += n
	}
	if total == 0 {
		sb.WriteString("No tasks yet.\n")
		return sb.String()
	}
	sb.WriteString("| status | tasks |\n|---|---:|\n")
	for _, st := range boardOrder {
		if n := b.Counts[st]; n > 0 {
			fmt.Fprintf(&sb, "| %s | %d |\n", st, n)
		}
	}
	fmt.Fprintf(&sb, "| **all** | **%d** |\n", total)
	byStatus := map[agentsql.Status][]agentsql.BoardTask{}
	for _, t := range append(append([]agentsql.BoardTask{}, b.Open...), b.Done...) {
		byStatus[t.Status] = append(byStatus[t.Status], t)
	}
	for _, st := range boardOrder {
		tasks := byStatus[st]
		if len(tasks) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\n## %s\n\n", strings.ToUpper(string(st[:1]))+strings.ReplaceAll(string(st[1:]), "_", " "))
		for _, t := range tasks {
			fmt.Fprintf(&sb, "- `%s` %s — %s, priority %d", shortID(t.ID.String()), markdownText(title(t.Prompt)), t.Type, t.Priority)
			if t.Agent != "" {
				fmt.Fprintf(&sb, ", agent %s", markdownText(t.Agent))
			}
			if len(t.DependsOn) > 0 {
				ids := make([]string, len(t.DependsOn))
				for i, d := range t.DependsOn {
					ids[i] = "`" + shortID(d.String()) + "`"
				}
				sb.WriteString(", after " + strings.Join(ids, ", "))
			}
			sb.WriteString("\n")
			switch {
			case t.Summary != "" && st == agentsql.StatusSucceeded:
				sb.WriteString("  - " + markdownText(firstLine(t.Summary, 300)) + "\n")
			case t.Error != "":
				sb.WriteString("  - " + markdownText(firstLine(t.Error, 300)) + "\n")
			}
		}
	}
	if shown := len(b.Open) + len(b.Done); shown < total {
		fmt.Fprintf(&sb, "\n%d older finished tasks are not listed.\n", total-shown)
	}
	return sb.String()
}

func shortID(id string) string { return id[:8] }

// title is a task's title: the first line of its prompt.
func title(prompt string) string {
	if t := firstLine(prompt, 120); t != "" {
		return t
	}
	return "(no prompt)"
}

// firstLine is s's first non-blank line, cut at n runes.
func firstLine(s string, n int) string {
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			if r := []rune(line); len(r) > n {
				return string(r[:n]) + "…"
			}
			return line
		}
	}
	return ""
}

// markdownText keeps a user's or a model's text from becoming markup of
// the list: no HTML, no links or emphasis that could pass for ours.
func markdownText(s string) string {
	return markdownEscaper.Replace(s)
}

var markdownEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "<", "&lt;", ">", "&gt;", "|", `\|`, "#", `\#`)

// TasksMDConfig is where a project's task list is written.
type TasksMDConfig struct {
	// Store holds the projects' files; tasks.md is written there.
	Store storage.Store
	// Path is the file's path in each project. Empty turns tasks.md off.
	Path string
}
