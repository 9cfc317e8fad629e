package sql_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestTreeSpendAfterRetention: a tree's figures are its root's and every
// descendant's, and stay so while retention deletes its tasks, a task
// between a child and the root included; the tree's last task takes the
// rollup with it.
func TestTreeSpendAfterRetention(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	insert := func(parent *uuid.UUID, cost float64) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		withoutPickup(t, pool, func(tx pgx.Tx) {
			if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, parent_task_id) VALUES ($1, 'chat', 'x', $2) RETURNING id`,
				project, parent).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET cost = $2, tokens_in = $3, tokens_out = 1 WHERE id = $1`, id, cost, int64(cost*10)); err != nil {
				t.Fatal(err)
			}
		})
		return id
	}
	root := insert(nil, 1)
	child := insert(&root, 2)
	grandchild := insert(&child, 4)
	sibling := insert(&root, 8)
	other := insert(nil, 16)

	check := func(name string, of uuid.UUID, want agentsql.TreeSpend) {
		t.Helper()
		got, err := agentsql.TaskTreeSpend(t.Context(), pool, of)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: tree of %s = %+v, want %+v", name, of, got, want)
		}
	}
	whole := agentsql.TreeSpend{RootTaskID: root, Tasks: 4, TokensIn: 150, TokensOut: 4, CostUSD: 15}
	check("Root", root, whole)
	check("Grandchild", grandchild, whole)
	check("OtherTree", other, agentsql.TreeSpend{RootTaskID: other, Tasks: 1, TokensIn: 160, TokensOut: 1, CostUSD: 16})

	// Cancel the child (its grandchild is cancelled with it) and let
	// retention delete both in one statement.
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'cancelled' WHERE id = $1`, child); err != nil {
		t.Fatal(err)
	}
	deleted := deleteFinished(t, pool)
	if deleted != 2 {
		t.Fatalf("retention deleted %d tasks, want the child and its grandchild", deleted)
	}
	check("AfterChildDeleted", root, whole)
	check("SiblingAfterChildDeleted", sibling, whole)

	// The root goes before the sibling: the sibling's tree keeps its figures.
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'cancelled' WHERE id = $1`, root); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'queued' WHERE id = $1 AND status = 'cancelled'`, sibling); err != nil {
		t.Fatal(err)
	}
	var siblingStatus string
	if err := pool.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, sibling).Scan(&siblingStatus); err != nil {
		t.Fatal(err)
	}
	if siblingStatus == "cancelled" {
		t.Fatal("the sibling was cancelled with the root; the test needs it alive")
	}
	if deleted = deleteFinished(t, pool); deleted != 1 {
		t.Fatalf("retention deleted %d tasks, want the root", deleted)
	}
	check("SiblingAfterRootDeleted", sibling, whole)

	// The tree's last task goes: nothing of it stays.
	if _, err := pool.Exec(t.Context(), `DELETE FROM ai_tasks WHERE id = $1`, sibling); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM task_tree_rollup WHERE root_task_id = $1`, root).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("rollup rows of a tree with no task left: %d (%v), want 0", rows, err)
	}
}

// deleteFinished runs retention's deletion of every finished task.
func deleteFinished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT agentworker_delete_finished_tasks($1, 500)`, time.Now().Add(time.Hour)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
