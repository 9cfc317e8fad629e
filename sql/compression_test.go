package sql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestWrittenValuesCompressWithLZ4: the values a task rewrites as it runs
// are compressed with lz4 where the server has it, and a checkpoint written
// after the migration is; a server without lz4 keeps pglz, and the
// migration still applies.
func TestWrittenValuesCompressWithLZ4(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)

	hasLZ4 := true
	if _, err := pool.Exec(ctx, `CREATE TEMP TABLE lz4_probe (v text COMPRESSION lz4)`); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
			t.Fatalf("probe lz4: %v", err)
		}
		hasLZ4 = false
	}
	want := "" // the default, pglz
	if hasLZ4 {
		want = "l"
	}
	columns := []struct{ table, column string }{
		{"task_checkpoints", "messages"}, {"task_checkpoints", "state"},
		{"change_set_entries", "content"}, {"change_set_entries", "cp_content"}, {"change_set_entries", "prior"},
		{"agent_events", "payload"},
	}
	for _, c := range columns {
		var got string
		if err := pool.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2`, c.table, c.column).Scan(&got); err != nil {
			t.Fatalf("%s.%s: %v", c.table, c.column, err)
		}
		if got != want {
			t.Errorf("%s.%s compression = %q, want %q (server has lz4: %v)", c.table, c.column, got, want, hasLZ4)
		}
	}

	// A conversation large enough to be compressed, written as a
	// checkpoint is.
	var task string
	if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		VALUES (gen_random_uuid(), 'build', 'x') RETURNING id::text`).Scan(&task); err != nil {
		t.Fatal(err)
	}
	messages := `[{"role":"system","content":"` + strings.Repeat("Write the file, then call finish. ", 200) + `"}]`
	if _, err := pool.Exec(ctx, `INSERT INTO task_checkpoints (task_id, attempt, iteration, messages, state)
		VALUES ($1, 1, 1, $2::jsonb, '{}')`, task, messages); err != nil {
		t.Fatal(err)
	}
	var method *string
	if err := pool.QueryRow(ctx, `SELECT pg_column_compression(messages) FROM task_checkpoints WHERE task_id = $1`, task).Scan(&method); err != nil {
		t.Fatal(err)
	}
	wantMethod := "pglz"
	if hasLZ4 {
		wantMethod = "lz4"
	}
	if method == nil || *method != wantMethod {
		t.Errorf("a %d-byte checkpoint is stored with compression %v, want %s", len(messages), method, wantMethod)
	}
}
