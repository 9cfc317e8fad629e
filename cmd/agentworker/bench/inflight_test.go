package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestWritesCountsWritingTransactions: on a cluster of its own (the count
// is the cluster's), writes moves by one for each transaction that wrote,
// at once, and not for read-only ones, which write no commit record.
func TestWritesCountsWritingTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbtest.PrivateCluster(t).URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := &database{pool: pool}
	if _, err := pool.Exec(ctx, `CREATE TABLE counted (n int)`); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		statements []string // each in a transaction of its own
		want       int64
	}{
		{name: "Reads", statements: []string{`SELECT count(*) FROM counted`, `SELECT 1`, `SELECT now()`}, want: 0},
		{name: "Writes", statements: []string{`INSERT INTO counted VALUES (1)`, `UPDATE counted SET n = n + 1`, `DELETE FROM counted`}, want: 3},
		{name: "RowLocks", statements: []string{`INSERT INTO counted VALUES (1)`, `SELECT * FROM counted FOR UPDATE`}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { // not parallel: they share the cluster's count
			before, err := writes(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.statements {
				if _, err := pool.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			after, err := writes(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if got := after - before; got != tt.want {
				t.Errorf("%d writing transactions counted, want %d", got, tt.want)
			}
		})
	}
}

// TestReceiptReadFollowsTheTableAsItGrows: the listener's read of each
// announcement goes through the (task_id, seq) index once the table has
// grown, even when the read was first made while the table was small and
// not analyzed since, as in every scenario's first minute. A plan kept from
// then scanned the whole table on every announcement.
func TestReceiptReadFollowsTheTableAsItGrows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'read' FROM generate_series(1, 2000)`); err != nil {
		t.Fatal(err)
	}
	events := func(tasks int, seqs string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO agent_events (task_id, project_id, seq, type)
			SELECT t.id, t.project_id, s, 'log' FROM (SELECT * FROM ai_tasks ORDER BY id LIMIT $1) t, `+seqs+` s`, tasks); err != nil {
			t.Fatal(err)
		}
	}
	events(5, "generate_series(1, 2)")
	if _, err := pool.Exec(ctx, `ANALYZE agent_events`); err != nil {
		t.Fatal(err)
	}

	reader, err := connectReceiptReader(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close(context.WithoutCancel(ctx)) })
	var tasks string
	if err := reader.QueryRow(ctx, `SELECT array_agg(id)::text FROM (SELECT id FROM ai_tasks ORDER BY id LIMIT 5) t`).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, `PREPARE receipt(uuid[], int[]) AS `+receiptQuery); err != nil {
		t.Fatal(err)
	}
	// More than five runs: Postgres then settles on a generic plan, if let.
	for range 6 {
		if _, err := reader.Exec(ctx, `EXECUTE receipt('`+tasks+`', '{0,0,0,0,0}')`); err != nil {
			t.Fatal(err)
		}
	}
	events(5, "generate_series(3, 40)")
	events(2000, "generate_series(41, 80)")

	rows, err := reader.Query(ctx, `EXPLAIN EXECUTE receipt('`+tasks+`', '{0,0,0,0,0}')`)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	// The rows are in today's partition of agent_events (the empty days
	// ahead cost nothing to scan).
	today := "agent_events_p" + time.Now().UTC().Format("20060102")
	if !strings.Contains(text, today+"_task_id_seq_created_at_key") || strings.Contains(text, "Seq Scan on "+today) {
		t.Fatalf("the receipt read does not go through the task's index:\n%s", text)
	}
}
