package worker_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestConflictEndsTypedAndRetryStartsFresh: someone edits a file the build
// changed while the build runs; the apply is refused whole, the task ends
// failed with a typed conflict error naming the path and the project
// unchanged, and a person's retry starts a fresh attempt against the
// current files, which lands.
func TestConflictEndsTypedAndRetryStartsFresh(t *testing.T) {
	t.Parallel()
	var h *harness
	var projectID uuid.UUID
	var edited atomic.Bool
	h = setup(t, setupOpts{responder: scripted.Func(func(req *scripted.Request) scripted.Reply {
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				if edited.CompareAndSwap(false, true) {
					if _, err := h.store.Write(t.Context(), projectID.String(), "a.txt", []byte("theirs\n")); err != nil {
						t.Error(err)
					}
				}
				return llmtest.Call("finish", map[string]string{"summary": "wrote a.txt"})
			}
		}
		return llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "mine\n"})
	})})
	projectID = uuid.New()
	if _, err := h.store.Write(t.Context(), projectID.String(), "a.txt", []byte("base\n")); err != nil {
		t.Fatal(err)
	}
	id := h.insertTask(t, projectID, "build", "write a.txt")
	all, task := h.waitDone(t, id)
	// What the worker had queued when the apply failed (the static checks'
	// log, the finish call's result, the stages since) is in the timeline,
	// before the failure.
	at := map[string]int{}
	for i, e := range all {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		key := ""
		switch p := p.(type) {
		case *events.Log:
			if strings.HasPrefix(p.Message, "static checks") {
				key = "static checks"
			}
		case *events.ToolCall:
			key = "tool_call " + p.ToolName
		case *events.Progress:
			if p.Kind == events.KindStageExit {
				key = "stage_exit " + p.Stage
			}
		case *events.Error:
			key = "error"
		}
		if _, seen := at[key]; key != "" && !seen {
			at[key] = i
		}
	}
	for _, k := range []string{"static checks", "tool_call finish", "stage_exit agent_loop", "stage_exit final_response"} {
		if i, ok := at[k]; !ok || i > at["error"] {
			t.Errorf("%s: at %d (found %t), want before the error at %d", k, i, ok, at["error"])
		}
	}
	if _, ok := at["error"]; !ok {
		t.Errorf("no error event in the timeline of the failed attempt")
	}
	var te handlers.TaskError
	if err := json.Unmarshal(task.Error, &te); err != nil || task.Status != agentsql.StatusFailed || te.Code != handlers.CodeConflict ||
		!strings.Contains(te.Message, "a.txt") {
		t.Fatalf("status %s, error %s: want failed with %s naming a.txt", task.Status, task.Error, handlers.CodeConflict)
	}
	if got, _, _ := h.store.Read(t.Context(), projectID.String(), "a.txt"); string(got) != "theirs\n" {
		t.Errorf("a.txt after the conflict = %q, want the other writer's", got)
	}
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionRetry, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the retry to end", 60*time.Second, func() bool {
		task, _ = agentsql.GetTask(t.Context(), h.pool, id)
		return task.Status.Terminal()
	})
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("retry: status %s, error %s", task.Status, task.Error)
	}
	if got, _, _ := h.store.Read(t.Context(), projectID.String(), "a.txt"); string(got) != "mine\n" {
		t.Errorf("a.txt after the retry = %q", got)
	}
}
