package sql_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestCheckpointAddsSpendAndReadsPause: one statement saves the checkpoint,
// adds the iteration's spend to the task and its run, and reads the pause
// request the next iteration boundary acts on.
func TestCheckpointAddsSpendAndReadsPause(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	save := func(iteration int, spend agentsql.Spend) bool {
		t.Helper()
		pause, err := agentsql.SaveCheckpoint(ctx, pool, f, agentsql.Checkpoint{TaskID: task.ID, Attempt: 1, Iteration: iteration,
			Messages: json.RawMessage(`[]`), State: json.RawMessage(`{}`)}, spend)
		if err != nil {
			t.Fatal(err)
		}
		return pause
	}
	if save(1, agentsql.Spend{TokensIn: 10, TokensOut: 5, Cost: 0.5}) {
		t.Error("pause reported with none requested")
	}
	if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET pause_requested = true WHERE id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	if !save(2, agentsql.Spend{TokensIn: 1, TokensOut: 1, Cost: 0.25}) {
		t.Error("pause request not reported")
	}
	var in, out, rin, rout int64
	var cost, rcost float64
	var iteration int
	if err := pool.QueryRow(ctx, `SELECT t.tokens_in, t.tokens_out, t.cost::float8, r.tokens_in, r.tokens_out, r.cost::float8, c.iteration
		FROM ai_tasks t JOIN task_runs r ON r.task_id = t.id JOIN task_checkpoints c ON c.task_id = t.id WHERE t.id = $1`, task.ID).
		Scan(&in, &out, &cost, &rin, &rout, &rcost, &iteration); err != nil {
		t.Fatal(err)
	}
	if in != 11 || out != 6 || cost != 0.75 || rin != 11 || rout != 6 || rcost != 0.75 || iteration != 2 {
		t.Errorf("task %d/%d/%v, run %d/%d/%v, checkpoint iteration %d; want 11/6/0.75 on both, iteration 2",
			in, out, cost, rin, rout, rcost, iteration)
	}
}

// TestFencedBatchTakesItsSeqs: a holder's batch takes consecutive seqs in
// its own statement (one update of the task row), and the mark that tells
// the row trigger to keep them ends with the statement: a plain insert
// later in the same transaction still gets its seq from the trigger, even
// one that supplies a seq of its own.
func TestFencedBatchTakesItsSeqs(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	plain := []agentsql.NewEvent{{Type: "log", Payload: json.RawMessage(`{"message":"plain"}`)}}
	if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, plain); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	batch := make([]agentsql.NewEvent, 3)
	for i := range batch {
		batch[i] = agentsql.NewEvent{Type: "log", Payload: json.RawMessage(`{"message":"held"}`)}
	}
	rows, err := agentsql.InsertEventBatch(ctx, tx, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID,
		Fence: &f.Epoch, Events: batch, AfterCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, r := range rows {
		seqs = append(seqs, *r.Seq)
	}
	if len(seqs) != 3 || seqs[0] != 2 || seqs[1] != 3 || seqs[2] != 4 {
		t.Fatalf("batch seqs = %v, want [2 3 4]", seqs)
	}
	var seq int
	if err := tx.QueryRow(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type, payload)
		VALUES ($1, $2, 999, 'log', '{}') RETURNING seq`, task.ID, task.ProjectID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != 5 {
		t.Fatalf("a plain insert after the batch got seq %d, want 5 from the trigger", seq)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var last, count int
	if err := pool.QueryRow(ctx, `SELECT t.last_seq, (SELECT count(DISTINCT seq) FROM agent_events WHERE task_id = t.id)
		FROM ai_tasks t WHERE t.id = $1`, task.ID).Scan(&last, &count); err != nil {
		t.Fatal(err)
	}
	if last != 5 || count != 5 {
		t.Errorf("last_seq %d with %d distinct seqs, want 5 and 5", last, count)
	}
}

// TestFencedBatchReturnsWhatItWrote: a holder's batch gets back only ids,
// seqs and times and completes the rows from what it sent; they must be the
// rows stored, payloads equal as JSON (the database stores them as jsonb),
// in both forms of the write (a statement, a pipeline).
func TestFencedBatchReturnsWhatItWrote(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	task, f := claimed(t, pool)
	batch := []agentsql.NewEvent{
		{Type: "log", Payload: json.RawMessage(`{"message":"first","level":"info","metadata":{"z":1,"a":[true,null]}}`)},
		{Type: "progress", Payload: json.RawMessage(`{"kind":"stage_enter","stage":"claim"}`)},
		{Type: "error", Payload: json.RawMessage(`{"message":"nul \u0000 here"}`)},
	}
	var got []agentsql.EventRow
	rows, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID,
		Fence: &f.Epoch, Key: uuid.New(), Events: batch, AfterCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rows...)
	p := &agentsql.Pipeline{}
	outcome := agentsql.QueueEventBatch(p, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID,
		Fence: &f.Epoch, Events: batch[:2], AfterCommit: true})
	if err := p.Run(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if rows, err = outcome(ctx, pool); err != nil {
		t.Fatal(err)
	}
	got = append(got, rows...)

	stored, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || len(stored) != 5 {
		t.Fatalf("returned %d rows, stored %d; want 5 and 5", len(got), len(stored))
	}
	for i := range stored {
		g, s := got[i], stored[i]
		if g.ID != s.ID || *g.Seq != *s.Seq || *g.TaskID != *s.TaskID || g.ProjectID != s.ProjectID || g.Type != s.Type || !g.CreatedAt.Equal(s.CreatedAt) {
			t.Errorf("row %d returned %+v, stored %+v", i, g, s)
		}
		var gp, sp any
		if err := json.Unmarshal(g.Payload, &gp); err != nil {
			t.Fatalf("row %d returned payload %s: %v", i, g.Payload, err)
		}
		if err := json.Unmarshal(s.Payload, &sp); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gp, sp) {
			t.Errorf("row %d returned payload %s, stored %s", i, g.Payload, s.Payload)
		}
	}
}

// TestFencedBatchWritesNextUnlessPaused: a holder's batch with a Next
// writes both in its statement, Next's seqs right after its own and each
// batch's key on its first row, unless a pause is requested: then only its
// own, and the task's seq counter moves by those alone, so the next write
// leaves no gap. Sent again, it writes nothing; fenced, it is refused; an
// unfenced batch may not carry a Next.
func TestFencedBatchWritesNextUnlessPaused(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	timeline := func(t *testing.T, task uuid.UUID) (msgs []string, keyed []string, last int) {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT payload->>'message', batch IS NOT NULL FROM agent_events WHERE task_id = $1 ORDER BY seq`, task)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var m string
			var key bool
			if err := rows.Scan(&m, &key); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
			if key {
				keyed = append(keyed, m)
			}
		}
		if err := pool.QueryRow(ctx, `SELECT last_seq FROM ai_tasks WHERE id = $1`, task).Scan(&last); err != nil {
			t.Fatal(err)
		}
		return msgs, keyed, last
	}
	tests := []struct {
		name      string
		pause     bool
		wantRows  []string // what the write returns, in order
		wantKeyed []string
	}{
		{name: "Written", wantRows: []string{"end 1", "checked", "start 2", "thinking"}, wantKeyed: []string{"end 1", "start 2"}},
		{name: "PauseRequested", pause: true, wantRows: []string{"end 1", "checked"}, wantKeyed: []string{"end 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task, f := claimed(t, pool)
			if tt.pause {
				if _, err := pool.Exec(ctx, `UPDATE ai_tasks SET pause_requested = true WHERE id = $1`, task.ID); err != nil {
					t.Fatal(err)
				}
			}
			_, _, before := timeline(t, task.ID)
			b := agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch, Key: uuid.New(),
				Events: logEvents("end 1", "checked"), AfterCommit: true,
				Next: &agentsql.NextBatch{Key: uuid.New(), Events: logEvents("start 2", "thinking")}}
			rows, err := agentsql.InsertEventBatch(ctx, pool, b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, r := range rows {
				var p struct{ Message string }
				if err := json.Unmarshal(r.Payload, &p); err != nil {
					t.Fatal(err)
				}
				got = append(got, p.Message)
				if *r.Seq != before+1+i {
					t.Errorf("row %d (%s) has seq %d, want %d", i, p.Message, *r.Seq, before+1+i)
				}
			}
			if !reflect.DeepEqual(got, tt.wantRows) {
				t.Fatalf("the write returned %v, want %v", got, tt.wantRows)
			}
			// Sent again (its reply lost): nothing more, Next included.
			if again, err := agentsql.InsertEventBatch(ctx, pool, b); err != nil || len(again) != 0 {
				t.Fatalf("the batch sent again wrote %d rows, %v; want none, no error", len(again), err)
			}
			if _, err := agentsql.InsertEvents(ctx, pool, task.ID, task.ProjectID, logEvents("after")); err != nil {
				t.Fatal(err)
			}
			msgs, keyed, last := timeline(t, task.ID)
			want := append(append([]string{}, tt.wantRows...), "after")
			if tail := msgs[len(msgs)-len(want):]; !reflect.DeepEqual(tail, want) || !reflect.DeepEqual(keyed, tt.wantKeyed) {
				t.Errorf("timeline ends %v with keys on %v, want %v with keys on %v", msgs, keyed, want, tt.wantKeyed)
			}
			if last != before+len(want) {
				t.Errorf("last_seq %d, want %d: the seqs have a gap", last, before+len(want))
			}
		})
	}

	t.Run("Fenced", func(t *testing.T) {
		t.Parallel()
		task, f := claimed(t, pool)
		stale := f.Epoch - 1
		_, err := agentsql.InsertEventBatch(ctx, pool, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &stale,
			Key: uuid.New(), Events: logEvents("end 1"), Next: &agentsql.NextBatch{Key: uuid.New(), Events: logEvents("start 2")}})
		if !errors.Is(err, agentsql.ErrFenced) {
			t.Fatalf("a stale holder's batch with a next = %v, want ErrFenced", err)
		}
		if msgs, _, _ := timeline(t, task.ID); slices.Contains(msgs, "end 1") || slices.Contains(msgs, "start 2") {
			t.Errorf("timeline %v holds a stale holder's events", msgs)
		}
	})

	// The statement that writes a Next is its batch's: a batch that does
	// not hold the task, or has no events, cannot carry one.
	t.Run("AloneRefused", func(t *testing.T) {
		t.Parallel()
		task, f := claimed(t, pool)
		for name, b := range map[string]agentsql.EventBatch{
			"Unfenced": {TaskID: task.ID, ProjectID: task.ProjectID, Events: logEvents("end 1")},
			"Empty":    {TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch},
		} {
			b.Next = &agentsql.NextBatch{Key: uuid.New(), Events: logEvents("start 2")}
			if _, err := agentsql.InsertEventBatch(ctx, pool, b); !errors.Is(err, agentsql.ErrNextAlone) {
				t.Errorf("%s: a batch with a next = %v, want ErrNextAlone", name, err)
			}
			var p agentsql.Pipeline
			outcome := agentsql.QueueEventBatch(&p, b)
			if err := p.Run(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if _, err := outcome(ctx, pool); !errors.Is(err, agentsql.ErrNextAlone) {
				t.Errorf("%s: a queued batch with a next = %v, want ErrNextAlone", name, err)
			}
		}
		if msgs, _, _ := timeline(t, task.ID); slices.Contains(msgs, "start 2") {
			t.Errorf("timeline %v holds a refused next", msgs)
		}
	})
}

// logEvents are log events with the given messages.
func logEvents(msgs ...string) []agentsql.NewEvent {
	out := make([]agentsql.NewEvent, len(msgs))
	for i, m := range msgs {
		out[i] = agentsql.NewEvent{Type: "log", Payload: json.RawMessage(`{"message":"` + m + `"}`)}
	}
	return out
}
