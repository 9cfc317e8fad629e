package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/handlers/tools/patch"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// The read routes an operator's console needs: a project's tasks, a task
// with its result and error, what a build changed, the project's files,
// and its spend.

// TaskView is a task as the API shows it (created, read, listed). The list
// leaves out input, result and error (summary and error_message say what
// they hold).
type TaskView struct {
	ID           uuid.UUID  `json:"id"`
	ProjectID    uuid.UUID  `json:"project_id"`
	Type         string     `json:"type"`
	Status       string     `json:"status"`
	Priority     int        `json:"priority,omitempty"`
	AgentID      *uuid.UUID `json:"agent_id,omitempty"`
	ParentTaskID *uuid.UUID `json:"parent_task_id,omitempty"`
	// TraceID is the trace of the request that created the task (GET
	// /v1/tasks/{id} and the create's answer only).
	TraceID string `json:"trace_id,omitempty"`
	// DependsOn lists the tasks this one waits for; Dependents those that
	// wait for it, Children those it is the parent of (the last two in
	// GET /v1/tasks/{id} only).
	DependsOn  []uuid.UUID `json:"depends_on,omitempty"`
	Dependents []uuid.UUID `json:"dependents,omitempty"`
	Children   []uuid.UUID `json:"children,omitempty"`
	Prompt     string      `json:"prompt"`
	// Title is the title a plan gave the task it planned (its input's
	// planned_task.title); "" for a task no plan made.
	Title string `json:"title,omitempty"`
	// PausePending: a pause of the running task was requested and takes
	// effect at its next iteration.
	PausePending bool    `json:"pause_pending,omitempty"`
	Model        string  `json:"model,omitempty"`
	Attempt      int     `json:"attempt"`
	Iterations   int     `json:"iterations"`
	TokensIn     int64   `json:"tokens_in"`
	TokensOut    int64   `json:"tokens_out"`
	CostUSD      float64 `json:"cost_usd"`
	// Tree is the spend of the tree the task is part of: its root with
	// every descendant, deleted ones included, beside the task's own
	// (GET /v1/tasks/{id} only).
	Tree         *agentsql.TreeSpend `json:"tree,omitempty"`
	Summary      string              `json:"summary,omitempty"`
	ErrorMessage string              `json:"error_message,omitempty"`
	Input        json.RawMessage     `json:"input,omitempty"`
	Result       json.RawMessage     `json:"result,omitempty"`
	Error        json.RawMessage     `json:"error,omitempty"`
	Version      int                 `json:"version"`
	CreatedAt    time.Time           `json:"created_at"`
	UpdatedAt    time.Time           `json:"updated_at"`
	StartedAt    *time.Time          `json:"started_at,omitempty"`
	FinishedAt   *time.Time          `json:"finished_at,omitempty"`
}

// TaskList is the answer of GET /v1/projects/{id}/tasks.
type TaskList struct {
	Tasks []TaskView `json:"tasks"`
	// Cursor is the project stream's position when the list was read: a
	// project stream started after it (?after=) misses no change.
	Cursor string `json:"cursor"`
}

// Bounds of the query parameters.
const (
	defaultTaskLimit = 50
	maxTaskLimit     = 200
	defaultUsageDays = 30
	maxUsageDays     = 366
)

// intParam reads a positive integer query parameter up to maxV.
func intParam(r *http.Request, name string, def, maxV int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxV {
		return 0, validation("%s must be 1 to %d", name, maxV)
	}
	return n, nil
}

// listTasks serves GET /v1/projects/{id}/tasks[?limit=n&before=task_id]:
// the newest tasks first; before pages to older ones.
func (a *API) listTasks(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", defaultTaskLimit, maxTaskLimit)
	if err != nil {
		return err
	}
	var before uuid.UUID
	if s := r.URL.Query().Get("before"); s != "" {
		if before, err = uuid.Parse(s); err != nil {
			return validation("before %q is not a task id", s)
		}
	}
	var parent uuid.UUID
	if s := r.URL.Query().Get("parent"); s != "" {
		if parent, err = uuid.Parse(s); err != nil {
			return validation("parent %q is not a task id", s)
		}
	}
	page, err := agentsql.ListProjectTasks(r.Context(), a.pool, accessOf(r).id, agentsql.TaskQuery{Before: before, Limit: limit, Parent: parent})
	if err != nil {
		return err
	}
	out := TaskList{Tasks: make([]TaskView, len(page.Tasks)), Cursor: sse.FormatProjectCursor(page.Head)}
	for i, t := range page.Tasks {
		out.Tasks[i] = TaskView{ID: t.ID, ProjectID: accessOf(r).id, Type: string(t.Type), Status: string(t.Status), Prompt: t.Prompt,
			Model: t.Model, Attempt: t.Attempt, Iterations: t.Iterations, TokensIn: t.TokensIn, TokensOut: t.TokensOut,
			CostUSD: t.Cost, Summary: t.Summary, ErrorMessage: t.ErrorMessage, Version: t.Version,
			CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
			Priority: t.Priority, AgentID: t.AgentID, ParentTaskID: t.ParentTaskID, DependsOn: t.DependsOn,
			Title: t.Title, PausePending: t.PauseRequested && t.Status == agentsql.StatusRunning}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getTask serves GET /v1/tasks/{id}: the task with its input, result and
// error.
func (a *API) getTask(w http.ResponseWriter, r *http.Request) error {
	t := accessOf(r).task
	iterations, err := agentsql.TaskIterations(r.Context(), a.pool, t.ID)
	if err != nil {
		return err
	}
	v := viewOf(t, iterations)
	if v.DependsOn, v.Dependents, v.Children, err = agentsql.TaskRelations(r.Context(), a.pool, t.ID); err != nil {
		return err
	}
	tree, err := agentsql.TaskTreeSpend(r.Context(), a.pool, t.ID)
	if err != nil {
		return err
	}
	v.Tree = &tree
	writeJSON(w, http.StatusOK, v)
	return nil
}

// viewOf is the view of a task read whole.
func viewOf(t agentsql.Task, iterations int) TaskView {
	v := TaskView{ID: t.ID, ProjectID: t.ProjectID, Type: string(t.Type), Status: string(t.Status), Prompt: t.Prompt,
		Model: t.Model, Attempt: t.Attempt, Iterations: iterations, TokensIn: t.TokensIn, TokensOut: t.TokensOut,
		CostUSD: t.Cost, Input: t.Input, Result: t.Result, Error: t.Error, Version: t.Version,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
		Priority: t.Priority, AgentID: t.AgentID, ParentTaskID: t.ParentTaskID, TraceID: t.TraceID}
	v.PausePending = t.PauseRequested && t.Status == agentsql.StatusRunning
	var in struct {
		Planned struct {
			Title string `json:"title"`
		} `json:"planned_task"`
	}
	if json.Unmarshal(t.Input, &in) == nil {
		v.Title = in.Planned.Title
	}
	var result struct {
		Summary string `json:"summary"`
	}
	if json.Unmarshal(t.Result, &result) == nil {
		v.Summary = result.Summary
	}
	var taskErr struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(t.Error, &taskErr) == nil {
		v.ErrorMessage = taskErr.Message
	}
	return v
}

// Change is one file of GET /v1/tasks/{id}/changes.
type Change struct {
	Path     string `json:"path"`
	Op       string `json:"op"` // create, update, delete or move
	FromPath string `json:"from_path,omitempty"`
	// BeforeKnown is false when the version the build changed was not
	// written by an earlier build (nor is still in storage): the diff then
	// shows the new content whole.
	BeforeKnown bool   `json:"before_known"`
	Binary      bool   `json:"binary,omitempty"`
	Size        int    `json:"size"` // of the new content
	Diff        string `json:"diff,omitempty"`
}

// Changes is the answer of GET /v1/tasks/{id}/changes.
type Changes struct {
	TaskID uuid.UUID `json:"task_id"`
	// Status is the change set's: open (the build is working), applying,
	// applied or discarded; "none" when the task staged no change.
	Status string   `json:"status"`
	Files  []Change `json:"files"`
}

// taskChanges serves GET /v1/tasks/{id}/changes: what a build changed (or
// is changing), one unified diff per file.
func (a *API) taskChanges(w http.ResponseWriter, r *http.Request) error {
	t := accessOf(r).task
	status, entries, err := agentsql.BuildChanges(r.Context(), a.pool, t.ID)
	if err != nil {
		return err
	}
	out := Changes{TaskID: t.ID, Status: status, Files: []Change{}}
	if status == "" {
		out.Status = "none"
	}
	for _, e := range entries {
		if !e.BeforeKnown && status != agentsql.ChangeSetApplied {
			a.beforeFromStore(r, t.ProjectID, &e)
		}
		out.Files = append(out.Files, changeOf(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// beforeFromStore fills in the version a build changed from storage while
// it is still there (the set is not applied yet): the file's current
// version is the one the change was made against.
func (a *API) beforeFromStore(r *http.Request, projectID uuid.UUID, e *agentsql.BuildChange) {
	path := e.Path
	if e.FromPath != "" {
		path = e.FromPath
	}
	if a.cfg.Store == nil {
		return
	}
	content, info, err := a.cfg.Store.Read(r.Context(), projectID.String(), path)
	if err == nil && (info.ETag == e.BaseETag || e.FromPath != "") {
		e.Before, e.BeforeKnown = content, true
	}
}

func changeOf(e agentsql.BuildChange) Change {
	c := Change{Path: e.Path, FromPath: e.FromPath, BeforeKnown: e.BeforeKnown, Size: len(e.Content)}
	existed := e.BaseETag != "" || e.FromPath != ""
	switch {
	case e.Op == agentsql.ChangeDelete:
		c.Op, c.Size = "delete", 0
	case e.FromPath != "":
		c.Op = "move"
	case existed:
		c.Op = "update"
	default:
		c.Op = "create"
	}
	if binary(e.Before) || binary(e.Content) {
		c.Binary = true
		return c
	}
	from := e.Path
	if e.FromPath != "" {
		from = e.FromPath
	}
	created := !existed || !e.BeforeKnown
	c.Diff = patch.Unified(from, e.Path, string(e.Before), string(e.Content), created, c.Op == "delete")
	return c
}

// binary reports content a text diff cannot show.
func binary(b []byte) bool {
	return !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0
}

// FileEntry is one file of GET /v1/projects/{id}/files.
type FileEntry struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	ETag       string    `json:"etag"`
	ModifiedAt time.Time `json:"modified_at"`
}

// FileContent is the answer of GET /v1/projects/{id}/files/{path}.
type FileContent struct {
	FileEntry
	// Content is the file as text; empty when Binary or TooLarge.
	Content  string `json:"content,omitempty"`
	Binary   bool   `json:"binary,omitempty"`
	TooLarge bool   `json:"too_large,omitempty"`
}

var errFileNotFound = &apiError{http.StatusNotFound, CodeNotFound, "file not found"}

// notAFile reports a store's answer for a path that names no regular file:
// missing, or (the path being clean already) a symlink or another special
// file the local store refuses to follow. Neither is a failure.
func notAFile(err error) bool {
	return errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrInvalidPath)
}

var errNoStore = &apiError{http.StatusServiceUnavailable, CodeUnavailable, "no file store is configured"}

// listFiles serves GET /v1/projects/{id}/files: every file of the project
// in storage, by path, without the sensitive ones (.env*, keys, …) the
// agents may not see either.
func (a *API) listFiles(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Store == nil {
		return errNoStore
	}
	files, err := a.cfg.Store.List(r.Context(), accessOf(r).id.String(), "")
	if err != nil {
		return err
	}
	out := []FileEntry{}
	for _, f := range files {
		if storage.CheckSensitive(f.Path) == nil {
			out = append(out, FileEntry{Path: f.Path, Size: f.Size, ETag: f.ETag, ModifiedAt: f.ModTime})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": out})
	return nil
}

// readFile serves GET /v1/projects/{id}/files/{path...}: one file, as text
// up to storage.DefaultMaxReadBytes. A sensitive file is refused as the
// tools refuse it.
func (a *API) readFile(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Store == nil {
		return errNoStore
	}
	path, err := storage.CleanPath(r.PathValue("path"))
	if err != nil {
		return validation("%v", err)
	}
	if err := storage.CheckSensitive(path); err != nil {
		return &apiError{http.StatusForbidden, CodeSensitiveFile, err.Error()}
	}
	project := accessOf(r).id.String()
	info, err := a.cfg.Store.Stat(r.Context(), project, path)
	if notAFile(err) {
		return errFileNotFound
	}
	if err != nil {
		return err
	}
	out := FileContent{FileEntry: FileEntry{Path: path, Size: info.Size, ETag: info.ETag, ModifiedAt: info.ModTime}}
	if info.Size > storage.DefaultMaxReadBytes {
		out.TooLarge = true
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	content, info, err := a.cfg.Store.Read(r.Context(), project, path)
	if notAFile(err) {
		return errFileNotFound
	}
	if err != nil {
		return err
	}
	out.Size, out.ETag, out.ModifiedAt = info.Size, info.ETag, info.ModTime
	if binary(content) {
		out.Binary = true
	} else {
		out.Content = string(content)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// UsageDay is one day of GET /v1/projects/{id}/usage.
type UsageDay struct {
	Day       string  `json:"day"` // YYYY-MM-DD, UTC
	Runs      int     `json:"runs"`
	Tasks     int     `json:"tasks"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
}

// Usage is the answer of GET /v1/projects/{id}/usage.
type Usage struct {
	DaysRequested int        `json:"days_requested"`
	Days          []UsageDay `json:"days"`
	Total         struct {
		Runs      int     `json:"runs"`
		TokensIn  int64   `json:"tokens_in"`
		TokensOut int64   `json:"tokens_out"`
		CostUSD   float64 `json:"cost_usd"`
	} `json:"total"`
}

// usage serves GET /v1/projects/{id}/usage[?days=n]: the project's runs,
// tokens and cost per UTC day, newest first, over the last n days (30).
// Per task, the task list carries each task's tokens and cost.
func (a *API) usage(w http.ResponseWriter, r *http.Request) error {
	days, err := intParam(r, "days", defaultUsageDays, maxUsageDays)
	if err != nil {
		return err
	}
	rows, err := agentsql.ProjectUsageByDay(r.Context(), a.pool, accessOf(r).id, days)
	if err != nil {
		return err
	}
	out := Usage{DaysRequested: days, Days: make([]UsageDay, len(rows))}
	for i, d := range rows {
		out.Days[i] = UsageDay{Day: d.Day.Format(time.DateOnly), Runs: d.Runs, Tasks: d.Tasks,
			TokensIn: d.TokensIn, TokensOut: d.TokensOut, CostUSD: d.Cost}
		out.Total.Runs += d.Runs
		out.Total.TokensIn += d.TokensIn
		out.Total.TokensOut += d.TokensOut
		out.Total.CostUSD += d.Cost
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
