package events_test

import (
	"strings"
	"testing"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestEmitRedacts: no secret of the corpus reaches agent_events, whichever
// payload field carries it.
func TestEmitRedacts(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, "chat")
	rec := events.NewRecorder(pool, task.ID, task.ProjectID)
	var seen []events.Payload
	rec.SetObserver(observerFunc(func(p events.Payload) { seen = append(seen, p) }))
	for _, c := range redact.Corpus {
		if _, err := rec.Emit(t.Context(),
			events.Log{Level: events.LevelInfo, Message: c.Text, Metadata: map[string]any{"detail": c.Text, "password": c.Secret}},
			events.Error{ErrorType: "x", Message: c.Text},
			events.ToolCall{ToolName: "read_file", ArgsSummary: c.Text, ResultSummary: c.Text},
			events.Progress{Kind: events.KindStreamComplete, Content: c.Text},
		); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 4*len(redact.Corpus) {
		t.Errorf("observer saw %d payloads, want %d", len(seen), 4*len(redact.Corpus))
	}
	rows, err := agentsql.TaskEventsAfter(t.Context(), pool, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, r := range rows {
		all.Write(r.Payload)
	}
	for _, c := range redact.Corpus {
		if strings.Contains(all.String(), c.Secret) {
			t.Errorf("%s: secret %q stored in agent_events", c.Name, c.Secret)
		}
	}
}

type observerFunc func(events.Payload)

func (f observerFunc) Observe(p events.Payload) { f(p) }
