// Package sql holds the database schema of agentworker (embedded migrations)
// and the queries every other package runs, kept together in one place.
// River's own tables are migrated through rivermigrate, in the same
// transaction as ours.
//
// Importers name it agentsql: its name is the standard library's
// database/sql, which a file beside it may import too, and agentsql.Task
// says whose type it is where sql.Task would not.
package sql

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLockKey serialises concurrent Migrate calls from several replicas.
const migrateLockKey int64 = 0x6167656e74776b72 // "agentwkr"

// Migration is one of our embedded schema migrations.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns our embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNN_description.sql", name)
		}
		version, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %q: version prefix: %w", name, err)
		}
		body, err := fs.ReadFile(migrationFiles, path.Join("migrations", name))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: version, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// MigrateResult says which of our migrations were applied by this call.
type MigrateResult struct {
	RiverVersions []int
	Applied       []string
}

// Migrate applies River's migrations, then ours in one transaction, under an
// advisory lock, so it is idempotent and safe to run from several replicas at
// once: the second waits, then finds nothing left to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := MigrateWithResult(ctx, pool, nil)
	return err
}

// MigrateWithResult is Migrate that also reports what it applied.
func MigrateWithResult(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (MigrateResult, error) {
	var res MigrateResult
	migrations, err := Migrations()
	if err != nil {
		return res, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return res, fmt.Errorf("create river migrator: %w", err)
	}
	// River's migrations cannot share one transaction (a later one uses an
	// enum value an earlier one adds), so a session-level advisory lock held
	// on a dedicated connection serialises the whole run across replicas.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("acquire connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return res, fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; a dead session releases it anyway.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLockKey)
	}()
	riverRes, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return res, fmt.Errorf("apply river migrations: %w", err)
	}
	for _, v := range riverRes.Versions {
		res.RiverVersions = append(res.RiverVersions, v.Version)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS agentworker_migrations (
			version integer PRIMARY KEY,
			name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create agentworker_migrations: %w", err)
		}
		applied := map[int]bool{}
		rows, err := tx.Query(ctx, "SELECT version FROM agentworker_migrations")
		if err != nil {
			return fmt.Errorf("read applied migrations: %w", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return fmt.Errorf("read applied migrations: %w", err)
		}
		for _, v := range versions {
			applied[v] = true
		}
		for _, m := range migrations {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO agentworker_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			res.Applied = append(res.Applied, m.Name)
		}
		if len(res.RiverVersions) > 0 {
			// Tables a newer River adds are internal too (migration 008);
			// on Supabase they were just granted to the API roles.
			if _, err := tx.Exec(ctx, `DO $$ BEGIN
				IF to_regprocedure('agentworker_seal_internal()') IS NOT NULL THEN
					PERFORM agentworker_seal_internal();
				END IF; END $$`); err != nil {
				return fmt.Errorf("seal river's tables: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if logger != nil {
		logger.InfoContext(ctx, "migrations applied", slog.Any("river_versions", res.RiverVersions), slog.Any("applied", res.Applied))
	}
	return res, nil
}
