package sql_test

import (
	"encoding/json"
	"testing"

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
