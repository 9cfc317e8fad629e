package sql_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestProjectRunSummary: runs grouped by day, status and error code, with
// retries, tokens, cost and average, p95 and max durations; another
// project's runs and runs older than the window are left out.
func TestProjectRunSummary(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	type run struct {
		project uuid.UUID
		attempt int
		status  string
		code    string
		ms      int
		tokens  int
		daysAgo int
	}
	runs := []run{
		{project, 1, "succeeded", "", 1000, 10, 0},
		{project, 2, "succeeded", "", 3000, 20, 0},
		{project, 1, "failed", "llm_rate_limited", 500, 5, 0},
		{project, 1, "succeeded", "", 2000, 1, 40},    // outside the window
		{uuid.New(), 1, "succeeded", "", 9000, 99, 0}, // another project
	}
	withoutPickup(t, pool, func(tx pgx.Tx) {
		for _, r := range runs {
			var task uuid.UUID
			if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'x') RETURNING id`, r.project).Scan(&task); err != nil {
				t.Fatal(err)
			}
			// A run starts running, then ends.
			if _, err := tx.Exec(t.Context(), `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, cost, started_at)
				VALUES ($1, $2, gen_random_uuid()::text, 'running', $3::bigint, $3::numeric / 100, now() - make_interval(days => $4::int))`,
				task, r.attempt, r.tokens, r.daysAgo); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(t.Context(), `UPDATE task_runs SET status = $2, error_code = nullif($3, ''),
				finished_at = started_at + make_interval(secs => $4::float8 / 1000) WHERE task_id = $1`,
				task, r.status, r.code, r.ms); err != nil {
				t.Fatal(err)
			}
		}
	})
	groups, err := agentsql.ProjectRunSummary(t.Context(), pool, project, 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 {
		t.Fatalf("groups = %+v, want succeeded and failed of today", groups)
	}
	ok, rl := groups[0], groups[1]
	if ok.Status != "succeeded" || ok.Runs != 2 || ok.Retries != 1 || ok.TokensIn != 30 || ok.Cost != 0.3 ||
		ok.AvgMS != 2000 || ok.MaxMS != 3000 || ok.P95MS < 2800 || ok.P95MS > 3000 {
		t.Errorf("succeeded group = %+v", ok)
	}
	if rl.Status != "failed" || rl.ErrorCode != "llm_rate_limited" || rl.Runs != 1 || rl.MaxMS != 500 {
		t.Errorf("rate-limited group = %+v", rl)
	}
}
