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
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	return ReadMigrations(sub)
}

// ReadMigrations reads the NNN_description.sql files at the top of fsys, in
// version order.
func ReadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" {
			continue
		}
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNN_description.sql", name)
		}
		version, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %q: version prefix: %w", name, err)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: version, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// The schema was built by 15 migrations before they were squashed into the
// baseline; a database migrated then holds exactly the baseline's schema.
const (
	historyFirst = "001_pipeline"
	historyLast  = "015_lz4_for_written_values"
	historyCount = 15
)

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
	migrations, err := Migrations()
	if err != nil {
		return MigrateResult{}, err
	}
	return MigrateList(ctx, pool, logger, migrations)
}

// MigrateList is MigrateWithResult with the given migrations in place of
// the embedded ones (the tests apply the pre-baseline history with it).
func MigrateList(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, migrations []Migration) (MigrateResult, error) {
	var res MigrateResult
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
		applied, err := appliedMigrations(ctx, tx, migrations)
		if err != nil {
			return err
		}
		for _, m := range migrations {
			if name, ok := applied[m.Version]; ok {
				if name != m.Name {
					return fmt.Errorf("migration %d is recorded as %q, but this build's is %q: the database was migrated by a build with other migrations", m.Version, name, m.Name)
				}
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
			// Tables a newer River adds are internal too (the baseline's row level security);
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

// appliedMigrations reads which migrations the database holds, by version.
// A database migrated with the pre-baseline history (when migrations lists
// the baseline) is recorded again as holding the baseline, which is the
// same schema.
func appliedMigrations(ctx context.Context, tx pgx.Tx, migrations []Migration) (map[int]string, error) {
	rows, err := tx.Query(ctx, "SELECT version, name FROM agentworker_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := map[int]string{}
	var version int
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&version, &name}, func() error {
		applied[version] = name
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	if applied[1] != historyFirst || len(migrations) == 0 || migrations[0].Name == historyFirst {
		return applied, nil
	}
	if len(applied) != historyCount || applied[historyCount] != historyLast {
		return nil, fmt.Errorf("the database holds %d of the %d migrations that preceded the baseline (last %q): migrate it with a build from before the squash first", len(applied), historyCount, historyLast)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM agentworker_migrations"); err != nil {
		return nil, fmt.Errorf("record the pre-baseline history as the baseline: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO agentworker_migrations (version, name) VALUES ($1, $2)", migrations[0].Version, migrations[0].Name); err != nil {
		return nil, fmt.Errorf("record the pre-baseline history as the baseline: %w", err)
	}
	return map[int]string{migrations[0].Version: migrations[0].Name}, nil
}
