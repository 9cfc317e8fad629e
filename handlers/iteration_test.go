package handlers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/poll"
)

// iterationStarts renders a timeline's iteration starts and what comes
// between them, one iteration a line: "start N thinking N: tool tool".
func iterationStarts(t *testing.T, evs []events.Event) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *events.Progress:
			switch p.Kind {
			case events.KindIterationStart:
				fmt.Fprintf(&b, "\nstart %d", p.Iteration)
			case events.KindThinking:
				fmt.Fprintf(&b, " thinking %d:", p.Iteration)
			}
		case *events.ToolCall:
			fmt.Fprintf(&b, " %s", p.ToolName)
		}
	}
	return strings.TrimPrefix(b.String(), "\n")
}

// TestEveryIterationStartsOnce: an iteration's start is written once,
// after the previous iteration's tool calls, whether the loop wrote it or
// the checkpoint before it did; and not at all for an iteration the budget
// or a pause request does not let start.
func TestEveryIterationStartsOnce(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a.txt": "a\n"}

	read := call("read_file", m{"path": "a.txt"})
	for _, tc := range []struct {
		name    string
		replies []scripted.Reply
		want    string
	}{
		{"ThreeIterations", []scripted.Reply{read, call("write_file", m{"path": "b.txt", "content": "b\n"}), call("finish", m{"summary": "wrote b.txt"})},
			"start 1 thinking 1: read_file\nstart 2 thinking 2: write_file\nstart 3 thinking 3: finish"},
		// Three identical reads stop the loop (oscillation); the repair
		// attempt's checkpoint starts the next iteration.
		{"Repair", []scripted.Reply{read, read, read, call("finish", m{"summary": "read a.txt"})},
			"start 1 thinking 1: read_file\nstart 2 thinking 2: read_file\nstart 3 thinking 3: read_file\nstart 4 thinking 4: finish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, tc.replies, handlers.Config{}, files)
			evs, task := h.wait(t, h.insert(t, "build", "read a.txt", nil))
			result(t, task)
			if got := iterationStarts(t, evs); got != tc.want {
				t.Fatalf("iterations:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}

	t.Run("BudgetSpent", func(t *testing.T) {
		t.Parallel()
		h := setup(t, []scripted.Reply{
			call("read_file", m{"path": "a.txt"}),
			call("write_file", m{"path": "b.txt", "content": "b\n"}),
		}, handlers.Config{MaxIterations: 2}, files)
		id := h.insert(t, "build", "write b.txt", nil)
		evs := h.waitSuspended(t, id, agentsql.StatusPaused)
		want := "start 1 thinking 1: read_file\nstart 2 thinking 2: write_file"
		if got := iterationStarts(t, evs); got != want {
			t.Fatalf("iterations:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("PauseRequested", func(t *testing.T) {
		t.Parallel()
		h := setup(t, []scripted.Reply{
			{Delay: time.Second, ToolCalls: call("read_file", m{"path": "a.txt"}).ToolCalls},
			call("finish", m{"summary": "read a.txt"}),
		}, handlers.Config{}, files)
		id := h.insert(t, "build", "read a.txt", nil)
		poll.Until(t, "the first model call", 10*time.Second, func() bool { return len(h.llm.Requests()) == 1 })
		if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionPause, agentsql.ControlOpts{}); err != nil {
			t.Fatal(err)
		}
		evs := h.waitSuspended(t, id, agentsql.StatusPaused)
		if got, want := iterationStarts(t, evs), "start 1 thinking 1: read_file"; got != want {
			t.Fatalf("iterations before the pause:\n%s\nwant:\n%s", got, want)
		}
	})
}

// waitSuspended waits until a task is in status, and returns its timeline.
func (h *harness) waitSuspended(t *testing.T, id uuid.UUID, status agentsql.Status) []events.Event {
	t.Helper()
	poll.Until(t, "task "+string(status), 30*time.Second, func() bool {
		task, err := agentsql.GetTask(t.Context(), h.pool, id)
		return err == nil && task.Status == status
	})
	rows, err := agentsql.TaskEventsAfter(t.Context(), h.pool, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]events.Event, len(rows))
	for i, r := range rows {
		evs[i] = events.FromRow(r)
	}
	return evs
}
