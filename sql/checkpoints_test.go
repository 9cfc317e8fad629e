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
