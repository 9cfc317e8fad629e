package sql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The reads behind an operator's view of a project: its tasks, their spend
// by day, and what each build changed.

// TaskSummary is a task as a project's task list shows it: no input, and
// of the result and error only their one-line summaries.
type TaskSummary struct {
	ID           uuid.UUID
	Type         TaskType
	Status       Status
	Prompt       string // the first 200 characters
	Model        string
	Attempt      int
	Iterations   int // the result's, else the last checkpoint's
	TokensIn     int64
	TokensOut    int64
	Cost         float64
	Summary      string // result.summary
	ErrorMessage string // error.message
	Version      int
	CreatedAt    time.Time
	UpdatedAt    time.Time
	StartedAt    *time.Time
	FinishedAt   *time.Time
	Priority     int
	AgentID      *uuid.UUID
	ParentTaskID *uuid.UUID
	DependsOn    []uuid.UUID // the tasks it waits for, succeeded or not
	// Title is the title of the planned task a plan made it from
	// (input.planned_task.title), "" for a task no plan made.
	Title string
	// PauseRequested: a pause was requested; a running task takes it at
	// its next iteration.
	PauseRequested bool
}

// TaskQuery selects a page of a project's tasks.
type TaskQuery struct {
	// Before pages to the tasks older than this one (uuid.Nil: the newest).
	Before uuid.UUID
	// Limit is the page size.
	Limit int
	// Parent keeps only the children of this task (uuid.Nil: every task).
	Parent uuid.UUID
}

// TaskPage is a page of a project's tasks, newest first, with the project
// stream's position when it was read.
type TaskPage struct {
	Tasks []TaskSummary
	// Head is the cursor of the last event of the project a project stream
	// could have delivered when the page was read (same snapshot): a stream
	// started after it misses no change the page does not show.
	Head ProjectCursor
}

// taskIterations is the iteration count of task t: the result's once it
// ended, else its checkpoint's.
const taskIterations = `coalesce((t.result ->> 'iterations')::int,
	(SELECT c.iteration FROM task_checkpoints c WHERE c.task_id = t.id), 0)`

// ListProjectTasks returns up to q.Limit tasks of a project, newest first,
// older than q.Before when it is not uuid.Nil (a task of another project as
// Before gives an empty page), children of q.Parent when it is not.
func ListProjectTasks(ctx context.Context, db DBTX, projectID uuid.UUID, q TaskQuery) (TaskPage, error) {
	// The head is looked for in the days not sealed (eventFloor); a head
	// found there at xid m is the project's unless a day sealed above m
	// may hold a later one: then the page is read again from m's floor
	// (from every day for a project with no event since the last seal).
	floor, err := eventFloor(ctx, db, nil, nil)
	if err != nil {
		return TaskPage{}, fmt.Errorf("list tasks of project %s: %w", projectID, err)
	}
	page, head, err := listProjectTasks(ctx, db, projectID, q, floor)
	if err != nil || !floorBefore(head, floor) {
		return page, err
	}
	page, _, err = listProjectTasks(ctx, db, projectID, q, head)
	return page, err
}

// floorBefore reports whether floor a is earlier than b.
func floorBefore(a, b pgtype.Timestamptz) bool {
	if a.InfinityModifier != b.InfinityModifier {
		return a.InfinityModifier < b.InfinityModifier
	}
	return a.InfinityModifier == pgtype.Finite && a.Time.Before(b.Time)
}

// listProjectTasks is ListProjectTasks looking for the head in the events
// from floor on; head is the floor of the head found.
func listProjectTasks(ctx context.Context, db DBTX, projectID uuid.UUID, q TaskQuery, floor pgtype.Timestamptz) (page TaskPage, head pgtype.Timestamptz, err error) {
	// One statement, so the tasks and the head cursor share a snapshot.
	rows, err := db.Query(ctx, `WITH head AS (
			SELECT xid::text::bigint AS xid, id FROM agent_events
			WHERE project_id = $1 AND created_at >= $5 AND xid < pg_snapshot_xmin(pg_current_snapshot())
			-- The stored xid, not the bigint output named xid: the index's
			-- order, read one entry deep instead of sorting every event of
			-- the project.
			ORDER BY agent_events.xid DESC, agent_events.id DESC LIMIT 1)
		SELECT agentworker_event_floor(coalesce((SELECT xid FROM head), 0)::text::xid8, NULL),
			coalesce((SELECT xid FROM head), 0), coalesce((SELECT id FROM head), 0),
			t.id, t.type, t.status, left(coalesce(t.prompt, ''), 200), coalesce(t.model, ''), t.attempt,
			`+taskIterations+`, t.tokens_in, t.tokens_out, t.cost::float8,
			coalesce(t.result ->> 'summary', ''), coalesce(t.error ->> 'message', ''), t.version,
			t.created_at, t.updated_at, t.started_at, t.finished_at, t.priority, t.agent_id, t.parent_task_id,
			(SELECT array_agg(d.depends_on_task_id ORDER BY d.created_at) FROM task_dependencies d WHERE d.task_id = t.id),
			coalesce(t.input -> 'planned_task' ->> 'title', ''), coalesce(t.pause_requested, false)
		FROM (SELECT 1) one
		LEFT JOIN LATERAL (
			SELECT * FROM ai_tasks t WHERE t.project_id = $1
			  AND ($2 = '00000000-0000-0000-0000-000000000000'::uuid
			       OR (t.created_at, t.id) < (SELECT b.created_at, b.id FROM ai_tasks b WHERE b.id = $2 AND b.project_id = $1))
			  AND ($4 = '00000000-0000-0000-0000-000000000000'::uuid OR t.parent_task_id = $4)
			ORDER BY t.created_at DESC, t.id DESC LIMIT $3) t ON true`, pgx.QueryExecModeCacheDescribe, projectID, q.Before, q.Limit, q.Parent, floor)
	if err != nil {
		return TaskPage{}, head, fmt.Errorf("list tasks of project %s: %w", projectID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                             *uuid.UUID
			s                              TaskSummary
			typ                            *string
			status                         *string
			prompt, model, summary, errMsg *string
			attempt, iterations, version   *int
			tokensIn, tokensOut            *int64
			cost                           *float64
			createdAt, updatedAt           *time.Time
			priority                       *int
		)
		if err := rows.Scan(&head, &page.Head.Xid, &page.Head.ID, &id, &typ, &status, &prompt, &model, &attempt,
			&iterations, &tokensIn, &tokensOut, &cost, &summary, &errMsg, &version,
			&createdAt, &updatedAt, &s.StartedAt, &s.FinishedAt, &priority, &s.AgentID, &s.ParentTaskID, &s.DependsOn,
			&s.Title, &s.PauseRequested); err != nil {
			return TaskPage{}, head, fmt.Errorf("list tasks of project %s: %w", projectID, err)
		}
		if id == nil { // no task: the row carries only the head
			continue
		}
		s.ID, s.Type, s.Status, s.Prompt, s.Model, s.Attempt = *id, TaskType(*typ), Status(*status), *prompt, *model, *attempt
		s.Iterations, s.TokensIn, s.TokensOut, s.Cost = *iterations, *tokensIn, *tokensOut, *cost
		s.Summary, s.ErrorMessage, s.Version, s.CreatedAt, s.UpdatedAt = *summary, *errMsg, *version, *createdAt, *updatedAt
		s.Priority = *priority
		page.Tasks = append(page.Tasks, s)
	}
	if err := rows.Err(); err != nil {
		return TaskPage{}, head, fmt.Errorf("list tasks of project %s: %w", projectID, err)
	}
	return page, head, nil
}

// TaskIterations returns the iteration count of a task (see TaskSummary).
func TaskIterations(ctx context.Context, db DBTX, taskID uuid.UUID) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT `+taskIterations+` FROM ai_tasks t WHERE t.id = $1`, taskID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("iterations of task %s: %w", taskID, ErrTaskNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("iterations of task %s: %w", taskID, err)
	}
	return n, nil
}

// UsageDay is a project's spend on one UTC day: every run started that
// day, whatever its outcome (a running one with what it has spent so far).
type UsageDay struct {
	Day       time.Time
	Runs      int
	Tasks     int
	TokensIn  int64
	TokensOut int64
	Cost      float64
}

// ProjectUsageByDay returns a project's spend per UTC day over the last
// days days (today included), newest first; days without runs are left out.
func ProjectUsageByDay(ctx context.Context, db DBTX, projectID uuid.UUID, days int) ([]UsageDay, error) {
	rows, err := db.Query(ctx, `SELECT (coalesce(r.started_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
			count(*), count(DISTINCT r.task_id), sum(r.tokens_in), sum(r.tokens_out), sum(r.cost)::float8
		FROM ai_tasks t JOIN task_runs r ON r.task_id = t.id
		WHERE t.project_id = $1
		  AND coalesce(r.started_at, r.created_at) >= ((now() AT TIME ZONE 'UTC')::date - ($2::int - 1)) AT TIME ZONE 'UTC'
		GROUP BY day ORDER BY day DESC`, projectID, days)
	if err != nil {
		return nil, fmt.Errorf("usage of project %s by day: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageDay, error) {
		var u UsageDay
		err := r.Scan(&u.Day, &u.Runs, &u.Tasks, &u.TokensIn, &u.TokensOut, &u.Cost)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("usage of project %s by day: %w", projectID, err)
	}
	return out, nil
}

// BuildChange is one change of a build's change set with what the path held
// before the build, as far as the database knows it.
type BuildChange struct {
	ChangeEntry
	// FromPath (of ChangeEntry) is set on a move of a file that existed
	// before the build; the move's delete of the source is not listed
	// separately. A file created and then moved within the build is a
	// plain creation.

	// Before is the content the build changed (of FromPath for a move):
	// nil when the file did not exist, else what the latest earlier
	// succeeded build of the project wrote there. BeforeKnown is false
	// when no earlier build wrote it (it came from elsewhere).
	Before      []byte
	BeforeKnown bool
}

// BuildChanges returns a build's changes in the order of first change,
// with the status of its change set ("" when the task has none: not a
// build, or it never staged a change).
func BuildChanges(ctx context.Context, db DBTX, taskID uuid.UUID) (status string, changes []BuildChange, err error) {
	status, _, err = ChangeSetState(ctx, db, taskID)
	if err != nil || status == "" {
		return status, nil, err
	}
	// The content before is what an earlier build wrote to the path (the
	// source of a move), the latest to finish before this one did; found
	// through ai_tasks' project index and the entries' primary key.
	rows, err := db.Query(ctx, `SELECT e.path, e.op, e.content, coalesce(e.from_path, ''), e.base_etag, e.ord, e.applied,
			prev.op, prev.content
		FROM change_set_entries e
		JOIN ai_tasks t ON t.id = e.task_id
		LEFT JOIN LATERAL (
			SELECT pe.op, pe.content FROM ai_tasks pt
			JOIN change_set_entries pe ON pe.task_id = pt.id AND pe.path = coalesce(e.from_path, e.path)
			WHERE pt.project_id = t.project_id AND pt.id <> t.id AND pt.status = 'succeeded'
			  AND pt.finished_at < coalesce(t.finished_at, 'infinity')
			ORDER BY pt.finished_at DESC LIMIT 1) prev ON true
		WHERE e.task_id = $1
		ORDER BY e.ord`, taskID)
	if err != nil {
		return "", nil, fmt.Errorf("changes of build %s: %w", taskID, err)
	}
	type row struct {
		BuildChange
		prevOp *string
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var c row
		err := r.Scan(&c.Path, &c.Op, &c.Content, &c.FromPath, &c.BaseETag, &c.Ord, &c.Applied, &c.prevOp, &c.Before)
		return c, err
	})
	if err != nil {
		return "", nil, fmt.Errorf("changes of build %s: %w", taskID, err)
	}
	deleted := map[string]bool{}
	movedFrom := map[string]bool{}
	for _, c := range all {
		if c.Op == ChangeDelete {
			deleted[c.Path] = true
		}
	}
	for i := range all {
		c := &all[i]
		if c.FromPath != "" && !deleted[c.FromPath] {
			c.FromPath = "" // its source was created in this build
		}
		if c.FromPath != "" {
			movedFrom[c.FromPath] = true
		}
	}
	for _, c := range all {
		if c.Op == ChangeDelete && movedFrom[c.Path] {
			continue
		}
		existed := c.BaseETag != "" || c.FromPath != ""
		c.BeforeKnown = !existed || c.prevOp != nil && *c.prevOp == ChangeWrite
		if !existed || !c.BeforeKnown {
			c.Before = nil
		}
		changes = append(changes, c.BuildChange)
	}
	return status, changes, nil
}
