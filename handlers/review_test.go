package handlers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// reviewState is what a task in review leaves in the database.
type reviewState struct {
	status    agentsql.Status
	version   int
	leased    bool
	setStatus string
	inbox     string // the status of its newest review_requested item
	errorText string
}

func (h *harness) reviewState(t *testing.T, id uuid.UUID) reviewState {
	t.Helper()
	var s reviewState
	if err := h.pool.QueryRow(t.Context(), `SELECT t.status, t.version, t.lease_owner IS NOT NULL,
			coalesce((SELECT status FROM change_sets WHERE task_id = t.id), ''),
			coalesce((SELECT status FROM inbox_items WHERE task_id = t.id AND kind = 'review_requested' ORDER BY created_at DESC LIMIT 1), ''),
			coalesce(t.error::text, '')
		FROM ai_tasks t WHERE t.id = $1`, id).Scan(&s.status, &s.version, &s.leased, &s.setStatus, &s.inbox, &s.errorText); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitReview waits until the task is in review at a version above after.
func (h *harness) waitReview(t *testing.T, id uuid.UUID, after int) reviewState {
	t.Helper()
	var s reviewState
	poll.Until(t, "task in review", 60*time.Second, func() bool {
		s = h.reviewState(t, id)
		return s.status == agentsql.StatusReview && s.version > after
	})
	return s
}

// staysStagedUntilApproved waits for the build id, which writes "new\n" to
// a.txt (once "old\n"), to be in review with its set staged and a.txt
// untouched, approves it and returns the task once it ended.
func (h *harness) staysStagedUntilApproved(t *testing.T, id uuid.UUID) agentsql.Task {
	t.Helper()
	s := h.waitReview(t, id, 0)
	if s.leased || s.setStatus != agentsql.ChangeSetOpen || s.inbox != "open" {
		t.Fatalf("in review: %+v; want no lease, an open change set and an open review_requested item", s)
	}
	if got := h.files(t)["a.txt"]; got != "old\n" {
		t.Fatalf("a.txt = %q while in review, want it untouched", got)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	_, task := h.wait(t, id)
	return task
}

func (h *harness) control(t *testing.T, id uuid.UUID, action agentsql.Action, answer string) {
	t.Helper()
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, action, agentsql.ControlOpts{Actor: "reviewer", Answer: answer}); err != nil {
		t.Fatalf("%s task %s: %v", action, id, err)
	}
}

func (h *harness) waitStatus(t *testing.T, id uuid.UUID, status agentsql.Status) {
	t.Helper()
	poll.Until(t, "task "+string(status), 60*time.Second, func() bool {
		task, err := agentsql.GetTask(t.Context(), h.pool, id)
		return err == nil && task.Status == status
	})
}

// TestReviewThenApprove: a build with input.review ends in review with its
// change set staged, nothing applied, no lease and a review_requested
// inbox item; approving it applies the set and the task succeeds.
func TestReviewThenApprove(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{call("write_file", m{"path": "a.txt", "content": "new\n"}), llmtest.Text("Changed a.")},
		handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change a.txt", m{"review": true})
	task := h.staysStagedUntilApproved(t, id)
	if res := result(t, task); len(res.FilesChanged) != 1 || res.FilesChanged[0].Path != "a.txt" {
		t.Errorf("result files = %+v", res.FilesChanged)
	}
	if got := h.files(t)["a.txt"]; got != "new\n" {
		t.Errorf("a.txt = %q after approve, want the build's", got)
	}
	if s := h.reviewState(t, id); s.setStatus != agentsql.ChangeSetApplied || s.inbox != "closed" {
		t.Errorf("after approve: %+v", s)
	}
	if n := len(h.llm.Requests()); n != 2 {
		t.Errorf("%d model calls, want 2: approving calls no model", n)
	}
}

// TestReviewApproveConflict: a file changed in storage after the build
// read it makes the approve apply nothing: the task is back in review with
// the conflict naming the file, its set still staged.
func TestReviewApproveConflict(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{call("write_file", m{"path": "a.txt", "content": "new\n"}), llmtest.Text("Changed a.")},
		handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change a.txt", m{"review": true})
	s := h.waitReview(t, id, 0)
	if _, err := h.store.Write(t.Context(), h.project.String(), "a.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	s = h.waitReview(t, id, s.version+1)
	if !strings.Contains(s.errorText, handlers.CodeConflict) || !strings.Contains(s.errorText, "a.txt") {
		t.Errorf("error = %s, want a conflict naming a.txt", s.errorText)
	}
	if s.setStatus != agentsql.ChangeSetOpen || s.leased {
		t.Errorf("after the conflict: %+v; want the set still staged and no lease", s)
	}
	if got := h.files(t)["a.txt"]; got != "theirs\n" {
		t.Errorf("a.txt = %q, want the other writer's", got)
	}
}

// TestReviewRejectWithFeedback: a reject with feedback continues the same
// conversation with the feedback, and the comments made since the
// revision (with their file and line), as the next user message; the
// revision ends in review again, and approving it lands the revised file.
func TestReviewRejectWithFeedback(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "a.txt", "content": "v1\n"}), llmtest.Text("Wrote v1."),
		call("write_file", m{"path": "a.txt", "content": "v2\n"}), llmtest.Text("Wrote v2."),
	}, handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change a.txt", m{"review": true})
	s := h.waitReview(t, id, 0)
	const feedback = "Please write v2 instead of v1."
	line := 1
	if _, err := agentsql.AddComment(t.Context(), h.pool, agentsql.Comment{TaskID: id, Author: "reviewer", Body: "v1 is the old name", Path: "a.txt", Line: &line}); err != nil {
		t.Fatal(err)
	}
	h.control(t, id, agentsql.ActionReject, feedback)
	h.waitReview(t, id, s.version+1)
	reqs := h.llm.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls, want 4", len(reqs))
	}
	msgs := reqs[2].Messages
	last := msgs[len(msgs)-1]
	if last.Role != "user" || !strings.Contains(last.Content, feedback) || !strings.Contains(last.Content, "a.txt:1: v1 is the old name") {
		t.Errorf("the revision's first request ends with %s %q, want the feedback and the line comment as a user message", last.Role, last.Content)
	}
	for _, msg := range reqs[3].Messages[len(msgs):] {
		if strings.Contains(msg.Content, feedback) {
			t.Errorf("the feedback was given twice")
		}
	}
	var sawV1 bool
	for _, msg := range msgs {
		sawV1 = sawV1 || strings.Contains(msg.Content, "Wrote v1.")
	}
	if !sawV1 {
		t.Errorf("the revision's request lacks the first conversation")
	}
	if got := h.files(t)["a.txt"]; got != "old\n" {
		t.Fatalf("a.txt = %q during review, want it untouched", got)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	_, task := h.wait(t, id)
	result(t, task)
	if got := h.files(t)["a.txt"]; got != "v2\n" {
		t.Errorf("a.txt = %q after approving the revision, want v2", got)
	}
}

// TestReviewRejectWithoutFeedback: a reject without feedback cancels the
// task and discards its change set; the project is untouched.
func TestReviewRejectWithoutFeedback(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{call("write_file", m{"path": "b.txt", "content": "new\n"}), llmtest.Text("Added b.")},
		handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "add b.txt", m{"review": true})
	h.waitReview(t, id, 0)
	h.control(t, id, agentsql.ActionReject, "")
	h.waitStatus(t, id, agentsql.StatusCancelled)
	if s := h.reviewState(t, id); s.setStatus != agentsql.ChangeSetDiscarded || s.inbox != "closed" {
		t.Errorf("after reject: %+v; want the set discarded and the item closed", s)
	}
	files := h.files(t)
	if len(files) != 1 || files["a.txt"] != "old\n" {
		t.Errorf("project files = %v, want only the untouched a.txt", files)
	}
}

// TestReviewRevisionInterrupted: a revision whose attempt is cut short (the
// model unavailable) loses nothing: the next attempt continues from the
// review's checkpoint with the staged set and the feedback, given once.
func TestReviewRevisionInterrupted(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "a.txt", "content": "v1\n"}), llmtest.Text("Wrote v1."),
		{Status: http.StatusServiceUnavailable, ErrorMessage: "overloaded"},
		call("read_file", m{"path": "a.txt"}), call("write_file", m{"path": "a.txt", "content": "v2\n"}), llmtest.Text("Wrote v2."),
	}, handlers.Config{RetryBackoff: 10 * time.Millisecond}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change a.txt", m{"review": true})
	s := h.waitReview(t, id, 0)
	const feedback = "Please write v2 instead of v1."
	h.control(t, id, agentsql.ActionReject, feedback)
	h.waitReview(t, id, s.version+1)
	reqs := h.llm.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model calls, want 6", len(reqs))
	}
	retry := reqs[3].Messages
	var given int
	for _, msg := range retry {
		if strings.Contains(msg.Content, feedback) {
			given++
		}
	}
	if last := retry[len(retry)-1]; given != 1 || last.Role != "user" {
		t.Errorf("the retried revision's request gives the feedback %d time(s) and ends with %s, want once, as its user message", given, last.Role)
	}
	// The staged v1 survived the interruption: the revision read it.
	if body := reqs[4].Messages[len(reqs[4].Messages)-1].Content; !strings.Contains(body, "v1") {
		t.Errorf("read_file after the interruption = %q, want the staged v1", body)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	_, task := h.wait(t, id)
	result(t, task)
	if got := h.files(t)["a.txt"]; got != "v2\n" {
		t.Errorf("a.txt = %q, want v2", got)
	}
}

// TestAgentReview: a build run by an agent with review set ends in review
// exactly as one with input.review does, its files untouched until it is
// approved; the same build run by an agent without it applies at once.
func TestAgentReview(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		review bool
	}{{"ReviewSet", true}, {"ReviewUnset", false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, []scripted.Reply{call("write_file", m{"path": "a.txt", "content": "new\n"}), llmtest.Text("Changed a.")},
				handlers.Config{}, map[string]string{"a.txt": "old\n"})
			agent := h.agent(t, "careful", "", nil)
			if _, err := h.pool.Exec(t.Context(), `UPDATE agents SET review = $2 WHERE id = $1`, agent, tt.review); err != nil {
				t.Fatal(err)
			}
			var id uuid.UUID
			if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, agent_id) VALUES ($1, 'build', 'change a.txt', $2) RETURNING id`,
				h.project, agent).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if !tt.review {
				_, task := h.wait(t, id)
				result(t, task)
				if got := h.files(t)["a.txt"]; got != "new\n" {
					t.Errorf("a.txt = %q, want the build's applied at once", got)
				}
				return
			}
			result(t, h.staysStagedUntilApproved(t, id))
			if got := h.files(t)["a.txt"]; got != "new\n" {
				t.Errorf("a.txt = %q after approve, want the build's", got)
			}
		})
	}
}

// TestReviseAfterApproveConflict: after an approve found a.txt changed in
// storage, a reject with feedback revises on a.txt's current version: the
// model is told which file changed and what it had staged, its staged
// change of that file is dropped (b.txt's is kept), and the revision's
// approve lands.
func TestReviseAfterApproveConflict(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "a.txt", "content": "new\n"}), call("write_file", m{"path": "b.txt", "content": "b\n"}), llmtest.Text("Changed a, added b."),
		call("read_file", m{"path": "a.txt"}), call("write_file", m{"path": "a.txt", "content": "theirs\nnew\n"}), llmtest.Text("Kept theirs and mine."),
	}, handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change a.txt", m{"review": true})
	s := h.waitReview(t, id, 0)
	if _, err := h.store.Write(t.Context(), h.project.String(), "a.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	s = h.waitReview(t, id, s.version+1)
	h.control(t, id, agentsql.ActionReject, "Keep their line too.")
	h.waitReview(t, id, s.version+1)
	reqs := h.llm.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model calls, want 6", len(reqs))
	}
	msgs := reqs[3].Messages
	if last := msgs[len(msgs)-1].Content; !strings.Contains(last, "Keep their line too.") || !strings.Contains(last, "a.txt") ||
		!strings.Contains(last, "-theirs") || !strings.Contains(last, "+new") || strings.Contains(last, "b.txt") {
		t.Errorf("the revision's first request ends with %q, want the feedback and a.txt's dropped change as a diff from its current content", last)
	}
	h.control(t, id, agentsql.ActionApprove, "")
	_, task := h.wait(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("the revision's approve: %s %s, want succeeded", task.Status, task.Error)
	}
	if files := h.files(t); files["a.txt"] != "theirs\nnew\n" || files["b.txt"] != "b\n" {
		t.Errorf("files after approving the revision = %v, want a.txt on their version and b.txt", files)
	}
}
