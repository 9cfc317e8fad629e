package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/testclock"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func TestStreamDeltasCoalesced(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)

	setup := func(t *testing.T, interval time.Duration) (*events.Recorder, *testclock.Clock, uuid.UUID) {
		t.Helper()
		task := newTask(t, pool, "chat")
		clock := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		opts := []events.RecorderOption{events.WithClock(clock.Now)}
		if interval > 0 {
			opts = append(opts, events.WithStreamInterval(interval))
		}
		return events.NewRecorder(pool, task.ID, task.ProjectID, opts...), clock, task.ID
	}
	progress := func(t *testing.T, taskID uuid.UUID) (deltas []*events.Progress, complete []*events.Progress) {
		t.Helper()
		rows, err := agentsql.TaskEventsAfter(t.Context(), pool, taskID, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			p, err := events.FromRow(row).Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch pr := p.(*events.Progress); pr.Kind {
			case events.KindStreamDelta:
				deltas = append(deltas, pr)
			case events.KindStreamComplete:
				complete = append(complete, pr)
			}
		}
		return deltas, complete
	}

	tests := []struct {
		name      string
		interval  time.Duration // 0: the default
		tokens    int
		tokenGap  time.Duration
		maxDeltas int
	}{
		// 1,000 tokens over 10 s at the default 250 ms: at most one write per
		// interval, plus the first token's.
		{name: "DefaultInterval", tokens: 1000, tokenGap: 10 * time.Millisecond, maxDeltas: 41},
		// A burst with no time passing writes the first token only; the rest
		// goes out with stream_complete's final flush.
		{name: "Burst", tokens: 500, tokenGap: 0, maxDeltas: 2},
		{name: "SlowTokens", interval: 50 * time.Millisecond, tokens: 20, tokenGap: 100 * time.Millisecond, maxDeltas: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, clock, taskID := setup(t, tt.interval)
			ctx := context.Background()
			var text strings.Builder
			for i := range tt.tokens {
				tok := string(rune('a'+i%26)) + " "
				text.WriteString(tok)
				if err := rec.StreamDelta(ctx, "m1", tok); err != nil {
					t.Fatal(err)
				}
				clock.Advance(tt.tokenGap)
			}
			if err := rec.StreamComplete(ctx, "m1", text.String()); err != nil {
				t.Fatal(err)
			}
			deltas, complete := progress(t, taskID)
			if len(deltas) > tt.maxDeltas || len(deltas) == 0 {
				t.Errorf("%d stream_delta events for %d tokens, want 1..%d", len(deltas), tt.tokens, tt.maxDeltas)
			}
			var joined strings.Builder
			for i, d := range deltas {
				joined.WriteString(d.Delta)
				if d.Seq != i+1 || d.MessageID != "m1" || d.TotalLength != joined.Len() {
					t.Errorf("delta %d: seq %d message %q totalLength %d (joined %d)", i, d.Seq, d.MessageID, d.TotalLength, joined.Len())
				}
			}
			if joined.String() != text.String() {
				t.Errorf("deltas join to %d bytes, want the %d streamed", joined.Len(), text.Len())
			}
			if len(complete) != 1 || complete[0].Content != text.String() || complete[0].TotalLength != text.Len() {
				t.Errorf("stream_complete events = %d, want one with the whole text", len(complete))
			}
			t.Logf("%d tokens → %d stream_delta events", tt.tokens, len(deltas))
		})
	}
}
