package sql_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func writeLog(t *testing.T, pool *pgxpool.Pool, project, task uuid.UUID, level, message string) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
		VALUES ($1, $2, 'log', jsonb_build_object('level', $3::text, 'message', $4::text)) RETURNING id`,
		task, project, level, message).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func messages(es []agentsql.LogEntry) string {
	var m []string
	for _, e := range es {
		m = append(m, e.Message)
	}
	return strings.Join(m, ",")
}

// TestProjectLogs: the project's log events only, newest first, filtered by
// task, run, level and text (a % in the text is a %), paged by cursor.
func TestProjectLogs(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	a, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "b"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "o"})
	if err != nil {
		t.Fatal(err)
	}
	writeLog(t, pool, project, a.ID, "info", "a1 before the run")
	var claim agentsql.Claim
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		claim, err = agentsql.ClaimTask(t.Context(), tx, a.ID, 1, "test", time.Minute)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var runID uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT id FROM task_runs WHERE task_id = $1 AND attempt = $2`, a.ID, claim.Task.Attempt).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	writeLog(t, pool, project, a.ID, "warn", "a2 disk 100% full")
	writeLog(t, pool, project, b.ID, "info", "b1 started")
	if _, err := pool.Exec(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
		VALUES ($1, $2, 'progress', '{"message": "b not a log"}')`, b.ID, project); err != nil {
		t.Fatal(err)
	}
	writeLog(t, pool, other.ProjectID, other.ID, "info", "other project")
	writeLog(t, pool, project, b.ID, "error", "b2 DISK gone")

	tests := []struct {
		name string
		q    agentsql.LogQuery
		want string
	}{
		{"All", agentsql.LogQuery{}, "b2 DISK gone,b1 started,a2 disk 100% full,a1 before the run"},
		{"Task", agentsql.LogQuery{TaskID: a.ID}, "a2 disk 100% full,a1 before the run"},
		{"Run", agentsql.LogQuery{RunID: runID}, "a2 disk 100% full"},
		{"Level", agentsql.LogQuery{Level: "info"}, "b1 started,a1 before the run"},
		{"Text", agentsql.LogQuery{Text: "disk"}, "b2 DISK gone,a2 disk 100% full"},
		{"TextPercentIsLiteral", agentsql.LogQuery{Text: "0%"}, "a2 disk 100% full"},
		{"TextUnderscoreIsLiteral", agentsql.LogQuery{Text: "_"}, ""},
		{"OtherProjectsTask", agentsql.LogQuery{TaskID: other.ID}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.q.Limit = 50
			es, next, err := agentsql.ProjectLogs(t.Context(), pool, project, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(es); got != tt.want {
				t.Errorf("logs = %q, want %q", got, tt.want)
			}
			if next != 0 {
				t.Errorf("next = %d on the last page", next)
			}
		})
	}

	t.Run("Paged", func(t *testing.T) {
		var pages []string
		q := agentsql.LogQuery{Limit: 3}
		for range 5 {
			es, next, err := agentsql.ProjectLogs(t.Context(), pool, project, q)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, messages(es))
			if next == 0 {
				break
			}
			q.Before = next
		}
		if got, want := strings.Join(pages, "|"), "b2 DISK gone,b1 started,a2 disk 100% full|a1 before the run"; got != want {
			t.Errorf("pages = %q, want %q", got, want)
		}
	})
}

// TestProjectLogsUseTheIndex: the logs query reads agent_events_log_idx,
// never the project's other events, whatever the filters.
func TestProjectLogsUseTheIndex(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	project := uuid.New()
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// A busy project: many events, few of them logs.
	if _, err := pool.Exec(t.Context(), `INSERT INTO agent_events (task_id, project_id, type, payload)
		SELECT $1, $2, CASE WHEN g % 50 = 0 THEN 'log' ELSE 'progress' END,
			jsonb_build_object('level', 'info', 'message', 'event ' || g)
		FROM generate_series(1, 5000) g`, task.ID, project); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `ANALYZE agent_events`); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]agentsql.LogQuery{
		"None":  {Limit: 50},
		"Level": {Level: "warn", Limit: 50},
		"Text":  {Text: "event 49", Before: 1 << 40, Limit: 50},
	} {
		t.Run(name, func(t *testing.T) {
			query, args := agentsql.ProjectLogsStatement(project, q, pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true})
			rows, err := pool.Query(t.Context(), "EXPLAIN (COSTS OFF) "+query, args...)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			// The events are in today's partition; its copy of the index is
			// agent_events_pYYYYMMDD_project_id_id_idx.
			today := "agent_events_p" + time.Now().UTC().Format("20060102")
			if !strings.Contains(plan, today+"_project_id_id_idx") || strings.Contains(plan, "Seq Scan on "+today) {
				t.Errorf("the logs query does not read agent_events_log_idx:\n%s", plan)
			}
			t.Logf("plan:\n%s", plan)
		})
	}
}
