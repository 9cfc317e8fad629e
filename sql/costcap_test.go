package sql_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// projectOf returns the project of a task.
func projectOf(t *testing.T, pool *pgxpool.Pool, task uuid.UUID) uuid.UUID {
	t.Helper()
	var p uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT project_id FROM ai_tasks WHERE id = $1`, task).Scan(&p); err != nil {
		t.Fatalf("project of task %s: %v", task, err)
	}
	return p
}

// spend adds usd to a task's cost, as a checkpoint does.
func spend(t *testing.T, pool *pgxpool.Pool, task uuid.UUID, usd float64) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET cost = cost + $2 WHERE id = $1`, task, usd); err != nil {
		t.Fatalf("spend on task %s: %v", task, err)
	}
}

func readCap(t *testing.T, pool *pgxpool.Pool, project uuid.UUID, def float64) agentsql.DayCap {
	t.Helper()
	c, err := agentsql.ReadDayCap(t.Context(), pool, project, def)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func setCap(t *testing.T, pool *pgxpool.Pool, project uuid.UUID, usd *float64) {
	t.Helper()
	if err := agentsql.SetProjectSettings(t.Context(), pool, agentsql.ProjectSettings{ProjectID: project, MaxCostUSDPerDay: usd}); err != nil {
		t.Fatal(err)
	}
}

func TestDayCapCountsEveryTaskOfTheDay(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a := insertTaskIn(t, pool, agentsql.StatusRunning)
	project := projectOf(t, pool, a)
	var b uuid.UUID
	if err := pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', 'paused') RETURNING id`,
		project).Scan(&b); err != nil {
		t.Fatal(err)
	}
	other := insertTaskIn(t, pool, agentsql.StatusRunning)
	spend(t, pool, a, 0.25)
	spend(t, pool, a, 0.5)
	spend(t, pool, b, 0.125)
	spend(t, pool, other, 9)

	c := readCap(t, pool, project, 0)
	if c.CapUSD != nil || c.SpentUSD != 0.875 {
		t.Fatalf("no default, no override: cap %v spent %v, want none and 0.875", c.CapUSD, c.SpentUSD)
	}
	if c.Reached(100) {
		t.Fatal("no cap is never reached")
	}
	if c = readCap(t, pool, project, 2); c.CapUSD == nil || *c.CapUSD != 2 || c.Reached(1) || !c.Reached(1.125) {
		t.Fatalf("the default holds without an override: %+v", c)
	}
	low := 0.5
	setCap(t, pool, project, &low)
	if c = readCap(t, pool, project, 2); c.CapUSD == nil || *c.CapUSD != 0.5 || !c.Reached(0) {
		t.Fatalf("the project's own cap holds over the default: %+v", c)
	}
	setCap(t, pool, project, nil)
	if c = readCap(t, pool, project, 2); *c.CapUSD != 2 {
		t.Fatalf("an unset override falls back to the default: %+v", c)
	}

	// Retention deletes the task: the day's spend stays.
	if _, err := pool.Exec(t.Context(), `DELETE FROM ai_tasks WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	if c = readCap(t, pool, project, 2); c.SpentUSD != 0.875 {
		t.Fatalf("after the task was deleted the day's spend is %v, want 0.875", c.SpentUSD)
	}
	// The day turned: yesterday's spend is not today's.
	if _, err := pool.Exec(t.Context(), `UPDATE project_day_spend SET day = day - 1 WHERE project_id = $1`, project); err != nil {
		t.Fatal(err)
	}
	if c = readCap(t, pool, project, 2); c.SpentUSD != 0 {
		t.Fatalf("a new day starts at 0, got %v", c.SpentUSD)
	}

	// Retention deletes the days before yesterday, and only those.
	if _, err := pool.Exec(t.Context(), `UPDATE project_day_spend SET day = day - 1 WHERE project_id = $1 AND task_id = $2`, project, b); err != nil {
		t.Fatal(err)
	}
	n, err := agentsql.DeleteDaySpendBefore(t.Context(), pool, time.Now().AddDate(0, 0, -1), 100)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d rows (%v), want the one of two days ago", n, err)
	}
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM project_day_spend WHERE project_id = $1`, project).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d rows left (%v), want yesterday's", left, err)
	}
}

func TestResumeUnderCap(t *testing.T) {
	t.Parallel()
	// capped is a task paused at its project's cap, having spent 1 dollar
	// today; budget a task paused at its own budget in the same project.
	setup := func(t *testing.T) (pool *pgxpool.Pool, project, capped, budget uuid.UUID) {
		t.Helper()
		pool = dbtest.New(t)
		capped = insertTaskIn(t, pool, agentsql.StatusRunning)
		project = projectOf(t, pool, capped)
		spend(t, pool, capped, 1)
		if _, err := pool.Exec(t.Context(), `UPDATE ai_tasks SET status = 'paused' WHERE id = $1`, capped); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, status) VALUES ($1, 'chat', 'x', 'paused') RETURNING id`,
			project).Scan(&budget); err != nil {
			t.Fatal(err)
		}
		for task, reason := range map[uuid.UUID]string{capped: "budget_exceeded", budget: "budget"} {
			if _, err := pool.Exec(t.Context(), `INSERT INTO inbox_items (project_id, task_id, kind, reason, title)
				VALUES ($1, $2, 'await_user_input', $3, 'paused')`, project, task, reason); err != nil {
				t.Fatal(err)
			}
		}
		return pool, project, capped, budget
	}
	status := func(t *testing.T, pool *pgxpool.Pool, task uuid.UUID) (string, string) {
		t.Helper()
		var st, item string
		if err := pool.QueryRow(t.Context(), `SELECT t.status, i.status FROM ai_tasks t JOIN inbox_items i ON i.task_id = t.id WHERE t.id = $1`,
			task).Scan(&st, &item); err != nil {
			t.Fatal(err)
		}
		return st, item
	}
	for _, tc := range []struct {
		name    string
		def     float64
		change  func(t *testing.T, pool *pgxpool.Pool, project uuid.UUID)
		resumes bool
	}{
		{name: "StillAtTheCap", def: 1, change: func(*testing.T, *pgxpool.Pool, uuid.UUID) {}},
		{name: "OverrideLowered", def: 5, change: func(t *testing.T, pool *pgxpool.Pool, project uuid.UUID) {
			v := 0.5
			setCap(t, pool, project, &v)
		}},
		{name: "CapRaised", def: 1, resumes: true, change: func(t *testing.T, pool *pgxpool.Pool, project uuid.UUID) {
			v := 1.5
			setCap(t, pool, project, &v)
		}},
		{name: "DayTurned", def: 1, resumes: true, change: func(t *testing.T, pool *pgxpool.Pool, project uuid.UUID) {
			if _, err := pool.Exec(t.Context(), `UPDATE project_day_spend SET day = day - 1 WHERE project_id = $1`, project); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "CapRemoved", def: 0, resumes: true, change: func(*testing.T, *pgxpool.Pool, uuid.UUID) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, project, capped, budget := setup(t)
			tc.change(t, pool, project)
			// Another project's call resumes none of this one's.
			if got, err := agentsql.ResumeUnderCap(t.Context(), pool, 0, uuid.New()); err != nil || len(got) != 0 {
				t.Fatalf("resume in another project: %v, %v", got, err)
			}
			got, err := agentsql.ResumeUnderCap(t.Context(), pool, tc.def, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.resumes != slices.Contains(got, capped) {
				t.Fatalf("resumed %v; want the capped task %s resumed: %v", got, capped, tc.resumes)
			}
			if slices.Contains(got, budget) {
				t.Fatal("a task paused at its own budget waits for a person, not the day")
			}
			st, item := status(t, pool, capped)
			if want := map[bool][2]string{true: {"queued", "closed"}, false: {"paused", "open"}}[tc.resumes]; st != want[0] || item != want[1] {
				t.Fatalf("capped task %s with its item %s, want %v", st, item, want)
			}
			if st, item := status(t, pool, budget); st != "paused" || item != "open" {
				t.Fatalf("budget task %s with its item %s, want paused and open", st, item)
			}
		})
	}
}

// TestClaimReadsTheDayCap: a claim returns its project's own cap and the
// day's spend committed before it, so the first model call reads nothing
// more; an unclaimable task's claim returns none.
func TestClaimReadsTheDayCap(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	earlier := insertProjectTaskIn(t, pool, project, agentsql.StatusRunning)
	spend(t, pool, earlier, 0.75)
	task := insertProjectTaskIn(t, pool, project, agentsql.StatusQueued)
	uncapped := insertTaskIn(t, pool, agentsql.StatusQueued)
	low := 0.5
	setCap(t, pool, project, &low)

	c, err := agentsql.ClaimAndStart(t.Context(), pool, task, 1, "test", time.Minute, true, 0)
	if err != nil || !c.Claimed {
		t.Fatalf("claim: claimed %t, %v", c.Claimed, err)
	}
	if c.DayCap == nil || c.DayCap.CapUSD == nil || *c.DayCap.CapUSD != 0.5 || c.DayCap.SpentUSD != 0.75 || !c.DayCap.Reached(0) {
		t.Fatalf("the claim's day cap is %+v, want the project's own 0.5, 0.75 spent", c.DayCap)
	}
	// Not claimable again under another job: nothing changed, nothing read.
	if c, err = agentsql.ClaimAndStart(t.Context(), pool, task, 2, "test", time.Minute, true, 0); err != nil || c.Claimed || c.DayCap != nil {
		t.Fatalf("a second claim: claimed %t, day cap %+v, %v; want neither", c.Claimed, c.DayCap, err)
	}
	// A project without a cap, claimed without a default: none, and no
	// spend summed.
	if c, err = agentsql.ClaimTask(t.Context(), pool, uncapped, 3, "test", time.Minute); err != nil || c.DayCap == nil || c.DayCap.CapUSD != nil || c.DayCap.SpentUSD != 0 {
		t.Fatalf("claim of an uncapped project's task: day cap %+v, %v; want no cap, nothing spent", c.DayCap, err)
	}
}

// TestClaimSumsTheDaySpendOnlyWhenCapped: the claim reads a project's spend
// rows only when the project has a cap (its own or the default it is
// given): a busy project's day holds a spend row per task, and an
// uncapped project's sum was read on every claim and thrown away.
func TestClaimSumsTheDaySpendOnlyWhenCapped(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	own := 1.0
	for _, tc := range []struct {
		name       string
		ownCap     *float64
		defaultCap float64
		wantCap    *float64
	}{
		{name: "uncapped", wantCap: nil},
		{name: "its own cap", ownCap: &own, wantCap: &own},
		{name: "the default cap", defaultCap: 2, wantCap: new(2.0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			project := uuid.New()
			for range 3 {
				spend(t, pool, insertProjectTaskIn(t, pool, project, agentsql.StatusRunning), 0.25)
			}
			if tc.ownCap != nil {
				setCap(t, pool, project, tc.ownCap)
			}
			task := insertProjectTaskIn(t, pool, project, agentsql.StatusQueued)
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			// The connection's counts not yet reported (its earlier
			// transactions' too) before and after the claim.
			spendScans := func() int64 {
				var n int64
				if err := tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0) FROM pg_stat_xact_user_tables
					WHERE relname = 'project_day_spend'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := spendScans()
			c, err := agentsql.ClaimAndStart(ctx, tx, task, 1, "test", time.Minute, true, tc.defaultCap)
			if err != nil || !c.Claimed || c.DayCap == nil {
				t.Fatalf("claim: claimed %t, day cap %+v, %v", c.Claimed, c.DayCap, err)
			}
			scans := spendScans() - before
			got := c.DayCap
			switch {
			case tc.wantCap == nil && (got.CapUSD != nil || got.SpentUSD != 0 || scans != 0):
				t.Errorf("uncapped: day cap %v, spent %v, %d scans of the spend rows; want no cap, 0 and none", got.CapUSD, got.SpentUSD, scans)
			case tc.wantCap != nil && (got.CapUSD == nil || *got.CapUSD != *tc.wantCap || got.SpentUSD != 0.75 || scans == 0):
				t.Errorf("day cap %v, spent %v, %d scans of the spend rows; want %v, 0.75 read", got.CapUSD, got.SpentUSD, scans, *tc.wantCap)
			}
		})
	}
}
