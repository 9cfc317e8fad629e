package sql_test

import (
	"encoding/json"
	"reflect"
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
