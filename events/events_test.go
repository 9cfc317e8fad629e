package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// newTask inserts a task of taskType in a new project.
func newTask(t *testing.T, pool *pgxpool.Pool, taskType agentsql.TaskType) agentsql.Task {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: taskType, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func allPayloads() []events.Payload {
	ok := true
	return []events.Payload{
		&events.AgentPhase{Phase: events.PhaseStarted, Status: "running", TaskType: "build", Attempt: 1},
		&events.ToolCall{ToolName: "move_file", ArgsSummary: "a → b", Success: true, Duration: 3, FromPath: "a", ToPath: "b"},
		&events.FileUpdate{Path: "b", Op: events.OpMove, FromPath: "a", ToPath: "b"},
		&events.SelfRepair{AttemptNumber: 1, MaxAttempts: 2, Trigger: "static check", Result: "pending"},
		&events.Log{Level: events.LevelWarn, Message: "m", Metadata: map[string]any{"raw": true}},
		&events.Error{ErrorType: "llm_error", Message: "boom", Recoverable: false},
		&events.Progress{Kind: events.KindToolComplete, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ToolName: "read_file", ToolSuccess: &ok, ToolResult: json.RawMessage(`{"success": true}`)}, // as jsonb renders it
	}
}

// Every payload type survives Go → agent_events → Go unchanged.
func TestRoundTripThroughDatabase(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, "build")
	rec := events.NewRecorder(pool, task.ID, task.ProjectID)
	want := allPayloads()
	var in []events.Payload
	for _, p := range want {
		in = append(in, reflect.ValueOf(p).Elem().Interface().(events.Payload))
	}
	written, err := rec.Emit(t.Context(), in...)
	if err != nil {
		t.Fatal(err)
	}
	var got []events.Event
	err = events.Follow(t.Context(), pool, task.ID, 0, func(ev events.Event) error {
		got = append(got, ev)
		if len(got) == len(want) {
			return events.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range got {
		if ev.Seq != i+1 || ev.ID != written[i].ID || ev.TaskID != task.ID || ev.ProjectID != task.ProjectID {
			t.Errorf("event %d = %+v", i, ev)
		}
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, want[i]) {
			t.Errorf("event %d decoded to %#v, want %#v", i, p, want[i])
		}
	}
}

func TestFollowStopsWithContext(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, "chat")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := events.Follow(ctx, pool, task.ID, 0, func(events.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Follow = %v, want the context's error", err)
	}
	// The listening connection went back to the pool, or was closed. A
	// connection whose query the deadline cancelled is destroyed, and the
	// pool counts it as acquired until its destroying goroutine has run.
	poll.Until(t, "the listening connection released", 5*time.Second, func() bool { return pool.Stat().AcquiredConns() == 0 })
}

func TestDecodeRejectsUnknownType(t *testing.T) {
	t.Parallel()
	if _, err := (events.Event{ID: 1, Type: "nope", Payload: []byte(`{}`)}).Decode(); err == nil {
		t.Fatal("Decode accepted an unknown type")
	}
	if _, err := (events.Event{ID: 1, Type: events.TypeLog, Payload: []byte(`{`)}).Decode(); err == nil {
		t.Fatal("Decode accepted malformed JSON")
	}
}

func TestFormatAndTerminal(t *testing.T) {
	t.Parallel()
	mk := func(p events.Payload) events.Event {
		body, _ := json.Marshal(p)
		return events.Event{Seq: 3, Type: p.EventType(), Payload: body}
	}
	tests := []struct {
		payload  events.Payload
		want     string
		terminal bool
	}{
		{events.AgentPhase{Phase: events.PhaseCompleted, Status: "succeeded", Summary: "done"}, "completed  succeeded: done", true},
		{events.AgentPhase{Phase: events.PhaseFailed, Status: "failed"}, "failed  failed", true},
		{events.AgentPhase{Phase: events.PhaseCoder, Action: "enter"}, "coder enter", false},
		{events.AgentPhase{Phase: events.PhaseCoder, Action: "enter", TraceID: "req-1"}, "coder enter [trace req-1]", false},
		// Never raw to a terminal: an escape sequence stays quoted.
		{events.AgentPhase{Phase: events.PhaseCoder, Action: "enter", TraceID: "x\x1b[2J"}, `coder enter [trace "x\x1b[2J"]`, false},
		{events.ToolCall{ToolName: "write_file", ArgsSummary: "a.txt", Success: false, ResultSummary: "nope"}, "write_file(a.txt) FAILED 0ms: nope", false},
		{events.FileUpdate{Op: events.OpMove, Path: "b", FromPath: "a", ToPath: "b"}, "move a → b", false},
		{events.Error{ErrorType: "x", Message: "y"}, "x: y (recoverable=false)", false},
		{events.Progress{Kind: events.KindStageEnter, Stage: "claim"}, "stage_enter claim", false},
	}
	for _, tt := range tests {
		ev := mk(tt.payload)
		if got := events.Format(ev); !strings.HasSuffix(got, tt.want) {
			t.Errorf("Format(%T) = %q, want suffix %q", tt.payload, got, tt.want)
		}
		if got := events.Terminal(ev); got != tt.terminal {
			t.Errorf("Terminal(%T %+v) = %t", tt.payload, tt.payload, got)
		}
	}
}

func TestAddAndFlushWriteInOrderInOneStatement(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, "chat")
	rec := events.NewRecorder(pool, task.ID, task.ProjectID)
	rec.Add(events.Log{Level: "info", Message: "1"}, events.Log{Level: "info", Message: "2"})
	if got, _ := agentsql.TaskEventsAfter(t.Context(), pool, task.ID, 0, 10); len(got) != 0 {
		t.Fatalf("Add wrote %d events before a flush", len(got))
	}
	written, err := rec.Emit(t.Context(), events.Log{Level: "info", Message: "3"})
	if err != nil || len(written) != 3 {
		t.Fatalf("Emit wrote %d events, %v", len(written), err)
	}
	for i, ev := range written {
		if ev.Seq != i+1 || !ev.CreatedAt.Equal(written[0].CreatedAt) {
			t.Errorf("event %d: seq %d created %s (want one statement, in order)", i, ev.Seq, ev.CreatedAt)
		}
		var l events.Log
		_ = json.Unmarshal(ev.Payload, &l)
		if l.Message != string(rune('1'+i)) {
			t.Errorf("event %d is %q", i, l.Message)
		}
	}
	if evs, err := rec.Flush(t.Context()); err != nil || len(evs) != 0 {
		t.Fatalf("empty Flush = %d, %v", len(evs), err)
	}
	// A failed write keeps the events for the next one.
	rec.Add(events.Log{Level: "info", Message: "4"})
	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := rec.Flush(cctx); err == nil {
		t.Fatal("Flush with a cancelled context succeeded")
	}
	if evs, err := rec.Flush(t.Context()); err != nil || len(evs) != 1 || evs[0].Seq != 4 {
		t.Fatalf("retry after a failed flush = %v, %v", evs, err)
	}
}

func TestFlushAsyncKeepsOrder(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	task := newTask(t, pool, "chat")
	rec := events.NewRecorder(pool, task.ID, task.ProjectID)
	for i := range 20 {
		rec.Add(events.Log{Level: "info", Message: fmt.Sprint(2 * i)})
		rec.FlushAsync(t.Context())
		if _, err := rec.Emit(t.Context(), events.Log{Level: "info", Message: fmt.Sprint(2*i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := agentsql.TaskEventsAfter(t.Context(), pool, task.ID, 0, 100)
	if err != nil || len(rows) != 40 {
		t.Fatalf("%d events, %v", len(rows), err)
	}
	for i, row := range rows {
		var l events.Log
		_ = json.Unmarshal(row.Payload, &l)
		if l.Message != fmt.Sprint(i) || *row.Seq != i+1 {
			t.Fatalf("event seq %d is %q, want %d", *row.Seq, l.Message, i)
		}
	}
	// A failed asynchronous write leaves its events queued for the next one.
	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec.Add(events.Log{Level: "info", Message: "40"})
	rec.FlushAsync(cctx)
	if evs, err := rec.Flush(t.Context()); err != nil || len(evs) != 1 || evs[0].Seq != 41 {
		t.Fatalf("flush after a failed async write = %v, %v", evs, err)
	}
}
