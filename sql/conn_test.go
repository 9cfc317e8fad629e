package sql_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestConfigurePoolSendsUUIDsDirectly: a configured pool's connections
// encode a uuid.UUID parameter without a detour through text (pgx's
// driver.Valuer fallback: format, fail, parse, encode again, 20
// allocations), read uuids back as uuid.UUID, and still run an
// AfterConnect set before.
func TestConfigurePoolSendsUUIDsDirectly(t *testing.T) { // not parallel: AllocsPerRun
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var earlier bool
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error { earlier = true; return nil }
	agentsql.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	id := uuid.New()
	var back uuid.UUID
	var asAny any
	if err := pool.QueryRow(t.Context(), `SELECT $1::uuid, $1::uuid`, id).Scan(&back, &asAny); err != nil {
		t.Fatal(err)
	}
	if back != id || asAny != any(id) {
		t.Errorf("round trip of %s: %s, and %#v as any; want the same uuid.UUID", id, back, asAny)
	}
	if !earlier {
		t.Error("the AfterConnect set before ConfigurePool did not run")
	}

	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tm, buf := conn.Conn().TypeMap(), make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := tm.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("encoding a uuid.UUID parameter takes %.0f allocations, want at most 2 (no detour through text)", allocs)
	}
}
