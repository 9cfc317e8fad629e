package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestRecorderFenceAndTransactions: events written in a transaction that
// rolls back are written by the next write, once; after a control cancel
// the holder's writes are refused, so the cancel's terminal event stays
// the last.
func TestRecorderFenceAndTransactions(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task := newTask(t, pool, "build")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(ctx, tx, task.ID, 1, "test", time.Minute)
		task = c.Task
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
	rolledBack := errors.New("the checkpoint failed")
	err = rec.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := rec.EmitIn(ctx, tx, events.Log{Level: "info", Message: "iteration 1"}); err != nil {
			return err
		}
		return rolledBack
	})
	if !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	if evs, err := rec.Emit(ctx, events.Log{Level: "info", Message: "iteration 2"}); err != nil || len(evs) != 2 {
		t.Fatalf("write after the rollback = %d events, %v; want the rolled back one, then the new one", len(evs), err)
	}
	if _, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	rec.Add(events.Log{Level: "info", Message: "late"})
	if _, err := rec.Flush(ctx); !errors.Is(err, agentsql.ErrFenced) {
		t.Fatalf("flush after the cancel = %v, want ErrFenced", err)
	}
	rows, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var messages []string
	for _, r := range rows {
		var p struct{ Message, Phase string }
		_ = json.Unmarshal(r.Payload, &p)
		messages = append(messages, p.Message+p.Phase)
		if *r.Seq != len(messages) {
			t.Errorf("seq %d at position %d", *r.Seq, len(messages))
		}
	}
	if last := rows[len(rows)-1]; last.Type != "agent_phase" || messages[len(messages)-1] != "cancelled" {
		t.Errorf("timeline = %v: the cancel's terminal event must be the last", messages)
	}
	if n := strings.Count(strings.Join(messages, "|"), "iteration 1"); n != 1 {
		t.Errorf("the rolled back event appears %d times in %v", n, messages)
	}
}
