package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// projectPaths lists a project's files, comma-separated.
func projectPaths(t *testing.T, store *storage.S3, project uuid.UUID) (string, error) {
	t.Helper()
	files, err := store.List(t.Context(), project.String(), "")
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	return strings.Join(paths, ","), err
}

// approvalModel asks to write keep.txt and drop.txt in its first turn and
// finishes once it has the results; it notes when each task's second call
// arrives, by the task's prompt.
type approvalModel struct {
	mu     sync.Mutex
	second map[string]time.Time
	// results holds the tool results each task's finishing call saw.
	results map[string][]llm.Message
}

func (m *approvalModel) Respond(req *scripted.Request) scripted.Reply {
	var prompt string
	var results []llm.Message
	for _, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleUser:
			if prompt == "" {
				prompt = msg.Content
			}
		case llm.RoleTool:
			results = append(results, msg)
		}
	}
	if len(results) == 0 {
		return llmtest.Calls(
			llmtest.Call("write_file", map[string]string{"path": "keep.txt", "content": "keep\n"}),
			llmtest.Call("write_file", map[string]string{"path": "drop.txt", "content": "drop\n"}))
	}
	m.mu.Lock()
	if _, ok := m.second[prompt]; !ok {
		m.second[prompt] = time.Now()
	}
	m.results[prompt] = results
	m.mu.Unlock()
	return llmtest.Call("finish", map[string]string{"summary": "wrote keep.txt"})
}

// parkAll inserts n builds whose every write asks, and waits until each
// waits for approval.
func parkAll(t *testing.T, e *procEnv, n int, tag string) map[uuid.UUID]uuid.UUID {
	t.Helper()
	policy := json.RawMessage(`{"tool_policy": [{"tool": "write_file", "action": "ask", "reason": "writes need a look"}]}`)
	tasks := map[uuid.UUID]uuid.UUID{}
	for i := range n {
		project := uuid.New()
		task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: project, Type: "build",
			Prompt: fmt.Sprintf("%s task %d", tag, i), Input: policy})
		if err != nil {
			t.Fatal(err)
		}
		tasks[task.ID] = project
	}
	poll.Until(t, fmt.Sprintf("%d tasks parked on ask", n), 120*time.Second, func() bool {
		var parked int
		err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE id = ANY ($1) AND status = 'awaiting_approval'
			AND (SELECT count(*) FROM tool_approvals a WHERE a.task_id = ai_tasks.id) = 2`, slices.Collect(mapKeys(tasks))).Scan(&parked)
		return err == nil && parked == n
	})
	return tasks
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// answer approves each task's keep.txt write and denies its drop.txt
// write, and returns when the last answer of each task was given.
func answer(t *testing.T, e *procEnv, id uuid.UUID) time.Time {
	t.Helper()
	approvals, err := agentsql.ToolApprovals(t.Context(), e.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, a := range approvals {
		action, opts := agentsql.ActionApproveCall, agentsql.ControlOpts{ToolCallID: a.ToolCallID, Actor: "tester"}
		if strings.Contains(a.Arguments, "drop.txt") {
			action, opts.Answer = agentsql.ActionDenyCall, "drop.txt is not wanted"
		}
		if _, err := agentsql.ControlTask(t.Context(), e.pool, id, action, opts); err != nil {
			t.Fatalf("%s %s of task %s: %v", action, a.ToolCallID, id, err)
		}
		last = time.Now()
	}
	return last
}

// TestApprovalsThroughKills: 50 builds each parked on two writes that
// ask, every worker killed with SIGKILL, all 100 calls answered while no
// worker runs (one approved, one denied per task), new workers started:
// every task finishes, every approved write ran exactly once and landed,
// every denied one never ran, and the model's next call had one result
// per call. Then the bench: with workers running, the time from the last
// answer of a task to its model's next call, p50 and p99.
func TestApprovalsThroughKills(t *testing.T) {
	t.Parallel()
	const n = 50
	e := newProcEnv(t)
	model := &approvalModel{second: map[string]time.Time{}, results: map[string][]llm.Message{}}
	e.llm = llmtest.NewWith(t, model)
	const lease = 2 * time.Second
	first := []*proc{e.start(t, lease), e.start(t, lease)}
	tasks := parkAll(t, e, n, "killed")
	for _, p := range first {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.exited
	}
	for id := range tasks {
		answer(t, e, id)
	}
	var queued int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE id = ANY ($1) AND status = 'queued'`,
		slices.Collect(mapKeys(tasks))).Scan(&queued); err != nil || queued != n {
		t.Fatalf("%d of %d tasks queued after the answers (%v)", queued, n, err)
	}
	e.start(t, lease)
	e.start(t, lease)
	poll.Until(t, "every task to finish on the new workers", 180*time.Second, func() bool {
		var done int
		err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ai_tasks WHERE id = ANY ($1) AND status IN ('succeeded', 'failed', 'blocked', 'cancelled')`,
			slices.Collect(mapKeys(tasks))).Scan(&done)
		return err == nil && done == n
	})
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for id, project := range tasks {
		task := e.task(t, id)
		if task.Status != agentsql.StatusSucceeded {
			t.Errorf("task %s: %s, error %s", id, task.Status, task.Error)
			continue
		}
		var keepRuns, dropRuns int
		if err := e.pool.QueryRow(t.Context(), `SELECT
			count(*) FILTER (WHERE payload ->> 'argsSummary' LIKE '%keep.txt%' OR payload ->> 'resultSummary' LIKE '%keep.txt%'),
			count(*) FILTER (WHERE payload ->> 'argsSummary' LIKE '%drop.txt%' OR payload ->> 'resultSummary' LIKE '%drop.txt%')
			FROM agent_events WHERE task_id = $1 AND type = 'tool_call' AND payload ->> 'toolName' = 'write_file'`, id).Scan(&keepRuns, &dropRuns); err != nil {
			t.Fatal(err)
		}
		if keepRuns != 1 || dropRuns != 0 {
			t.Errorf("task %s: the approved write ran %d times, the denied one %d; want 1 and 0", id, keepRuns, dropRuns)
		}
		approvals, err := agentsql.ToolApprovals(t.Context(), e.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range approvals {
			if (a.Status == agentsql.ApprovalApproved) != (a.Output != nil) {
				t.Errorf("task %s call %s: %s with output %v", id, a.ToolCallID, a.Status, a.Output != nil)
			}
		}
		if paths, err := projectPaths(t, store, project); err != nil || paths != "keep.txt" {
			t.Errorf("task %s: project files %v (%v), want keep.txt alone", id, paths, err)
		}
		model.mu.Lock()
		results := model.results[task.Prompt]
		model.mu.Unlock()
		if len(results) != 2 || !strings.Contains(results[0].Content+results[1].Content, "drop.txt is not wanted") {
			t.Errorf("task %s: the finishing call saw results %+v, want the two calls' results", id, results)
		}
	}

	// The bench: workers running, tasks parked, each answered in turn.
	bench := parkAll(t, e, n, "bench")
	var lat []time.Duration
	for id := range bench {
		prompt := e.task(t, id).Prompt
		answered := answer(t, e, id)
		poll.Until(t, "the model's next call", 30*time.Second, func() bool {
			model.mu.Lock()
			defer model.mu.Unlock()
			_, ok := model.second[prompt]
			return ok
		})
		model.mu.Lock()
		lat = append(lat, model.second[prompt].Sub(answered))
		model.mu.Unlock()
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("approve → the model's next call over %d tasks (2 serve processes, WORKER_CONCURRENCY=2): p50 %s, p99 %s, max %s",
		len(lat), p50.Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	// A figure, not a limit: timed assertions fail on a loaded machine
	// (p99 1.06 s at load 25 on 2 CPUs); docs/performance.md quotes it.
}

// TestApprovedCallKilledBeforeItsCheckpoint: the worker that runs an
// approved call is killed after the call ran and before the transaction
// that records its output (with the checkpoint holding it) commits: the
// next worker runs the call again from the rewound change set, and the
// write lands once, its output recorded once.
func TestApprovedCallKilledBeforeItsCheckpoint(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	model := &approvalModel{second: map[string]time.Time{}, results: map[string][]llm.Message{}}
	e.llm = llmtest.NewWith(t, model)
	const lease = 2 * time.Second
	first := e.start(t, lease)
	tasks := parkAll(t, e, 1, "held")
	var id uuid.UUID
	var project uuid.UUID
	for id, project = range tasks {
	}

	// Hold the checkpoint row: the resumed attempt runs the approved
	// call, then waits to record it.
	hold, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(t.Context())
	if _, err := hold.Exec(t.Context(), `SELECT 1 FROM task_checkpoints WHERE task_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	answer(t, e, id)
	waiting := func() bool {
		var n int
		err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO task_checkpoints%'`).Scan(&n)
		return err == nil && n > 0
	}
	poll.Until(t, "the resumed attempt to wait on its checkpoint, the call run", 60*time.Second, waiting)
	var staged int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM change_set_entries WHERE task_id = $1 AND path = 'keep.txt'`, id).Scan(&staged); err != nil || staged != 1 {
		t.Fatalf("the approved write staged %d entries (%v) before the kill, want 1: it ran", staged, err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// As the server's client_connection_check_interval would: the killed
	// process's waiting backend ends without running what it was sent.
	if _, err := e.pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO task_checkpoints%'`); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the killed backend to end", 10*time.Second, func() bool { return !waiting() })
	if err := hold.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	var output *string
	if err := e.pool.QueryRow(t.Context(), `SELECT output FROM tool_approvals WHERE task_id = $1 AND status = 'approved'`, id).Scan(&output); err != nil || output != nil {
		t.Fatalf("after the kill: output %v (%v), want none recorded", output, err)
	}

	e.start(t, lease)
	poll.Until(t, "the task to finish on the second worker", 60*time.Second, func() bool { return e.task(t, id).Status.Terminal() })
	task := e.task(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status %s, error %s", task.Status, task.Error)
	}
	var recorded, keepRuns int
	if err := e.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM tool_approvals WHERE task_id = $1 AND output IS NOT NULL),
		(SELECT count(*) FROM agent_events WHERE task_id = $1 AND type = 'tool_call' AND payload ->> 'toolName' = 'write_file'
			AND (payload ->> 'argsSummary' LIKE '%keep.txt%' OR payload ->> 'resultSummary' LIKE '%keep.txt%'))`, id).Scan(&recorded, &keepRuns); err != nil {
		t.Fatal(err)
	}
	if recorded != 1 || keepRuns != 1 {
		t.Errorf("outputs recorded %d, write_file events for keep.txt %d; want 1 and 1", recorded, keepRuns)
	}
	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	paths, err := projectPaths(t, store, project)
	if content, _, rerr := store.Read(t.Context(), project.String(), "keep.txt"); err != nil || rerr != nil ||
		paths != "keep.txt" || string(content) != "keep\n" {
		t.Errorf("project files %v (%v), keep.txt %q (%v); want keep.txt once", paths, err, content, rerr)
	}
	t.Logf("runs: %s", e.runs(t, id))
}
