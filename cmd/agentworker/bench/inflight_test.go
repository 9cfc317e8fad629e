package bench

import (
	"testing"

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
