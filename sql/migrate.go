// Package sql holds the database schema of agentworker (embedded versioned
// migrations for tables, and function files for functions, triggers, views
// and policies) and the queries every other package runs, kept together in
// one place.
// River's own tables are migrated through rivermigrate, in the same
// transaction as ours.
//
// Importers name it agentsql: its name is the standard library's
// database/sql, which a file beside it may import too, and agentsql.Task
// says whose type it is where sql.Task would not.
package sql

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql functions/*.sql
var schemaFiles embed.FS

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
	sub, err := fs.Sub(schemaFiles, "migrations")
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

// FunctionFile is one file of sql/functions: the functions, triggers,
// views and policies of one concern with their settings, written so that
// applying it again replaces them (CREATE OR REPLACE, DROP … IF EXISTS).
type FunctionFile struct {
	Name     string
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// Functions returns the embedded function files in name order, the order
// they are applied in.
func Functions() ([]FunctionFile, error) {
	sub, err := fs.Sub(schemaFiles, "functions")
	if err != nil {
		return nil, fmt.Errorf("read embedded function files: %w", err)
	}
	return ReadFunctions(sub)
}

// ReadFunctions reads the *.sql files at the top of fsys in name order.
func ReadFunctions(fsys fs.FS) ([]FunctionFile, error) {
	entries, err := fs.ReadDir(fsys, ".") // sorted by name
	if err != nil {
		return nil, fmt.Errorf("read function files: %w", err)
	}
	var out []FunctionFile
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read function file %q: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		out = append(out, FunctionFile{Name: e.Name(), SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	return out, nil
}

// The migrations 001_baseline took in when the functions moved to
// sql/functions; a database migrated with them holds the baseline's tables.
var folded = []string{"001_baseline", "002_task_graph", "003_token_revocation", "004_exactly_once",
	"005_provider_budget", "006_operator", "007_review", "008_documents", "009_trace", "010_partitions",
	"011_archive", "012_task_event_floor", "013_event_days"}

// MigrateResult says which of our migrations and function files were
// applied by this call.
type MigrateResult struct {
	RiverVersions []int
	Applied       []string
	Functions     []string
}

// Migrate applies River's migrations, then ours, then each function file
// that is new or changed since it was last applied (by checksum), ours and
// the files in one transaction, under an advisory lock, so it is idempotent
// and safe to run from several replicas at once: the second waits, then
// finds nothing left to do.
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
	functions, err := Functions()
	if err != nil {
		return MigrateResult{}, err
	}
	return MigrateList(ctx, pool, logger, migrations, functions)
}

// MigrateList is MigrateWithResult with the given migrations and function
// files in place of the embedded ones.
func MigrateList(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, migrations []Migration, functions []FunctionFile) (MigrateResult, error) {
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
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS agentworker_function_files (
			name text PRIMARY KEY,
			checksum text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create agentworker_function_files: %w", err)
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
		if res.Functions, err = applyFunctions(ctx, tx, functions); err != nil {
			return err
		}
		if len(res.RiverVersions) > 0 || len(res.Applied) > 0 || len(res.Functions) > 0 {
			// River's tables are internal too, and so are those of a newer
			// River (on Supabase they were just granted to the API roles).
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
		logger.InfoContext(ctx, "migrations applied", slog.Any("river_versions", res.RiverVersions), slog.Any("applied", res.Applied), slog.Any("functions", res.Functions))
	}
	return res, nil
}

// appliedMigrations reads which migrations the database holds, by version.
// A database migrated with the migrations the baseline folded in (when
// migrations lists the folded baseline) is recorded again as holding the
// baseline, which has the same tables; its functions are the files'.
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
	last := len(folded)
	if applied[2] != folded[1] || slices.ContainsFunc(migrations, func(m Migration) bool { return m.Name == folded[1] }) {
		return applied, nil
	}
	if len(applied) != last || applied[last] != folded[last-1] {
		return nil, fmt.Errorf("the database holds %d of the %d migrations the baseline folded in (last %q): migrate it with a build from before the fold first", len(applied), last, folded[last-1])
	}
	if _, err := tx.Exec(ctx, "DELETE FROM agentworker_migrations WHERE version > 1"); err != nil {
		return nil, fmt.Errorf("record the folded migrations as the baseline: %w", err)
	}
	return map[int]string{1: applied[1]}, nil
}

// applyFunctions applies, in order, each function file whose checksum is
// not the one recorded for it, and records the new one. Function bodies are
// not checked at creation (as pg_dump restores them): a body may call a
// function of a later file; a trigger, view or policy still needs what it
// names to exist, so it sits in the file of its function or a later one.
func applyFunctions(ctx context.Context, tx pgx.Tx, functions []FunctionFile) ([]string, error) {
	rows, err := tx.Query(ctx, "SELECT name, checksum FROM agentworker_function_files")
	if err != nil {
		return nil, fmt.Errorf("read applied function files: %w", err)
	}
	recorded, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var nc [2]string
		return nc, r.Scan(&nc[0], &nc[1])
	})
	if err != nil {
		return nil, fmt.Errorf("read applied function files: %w", err)
	}
	checksums := map[string]string{}
	for _, nc := range recorded {
		checksums[nc[0]] = nc[1]
	}
	var applied []string
	for _, f := range functions {
		if checksums[f.Name] == f.Checksum {
			continue
		}
		if len(applied) == 0 {
			if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
				return nil, fmt.Errorf("apply function files: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return nil, fmt.Errorf("apply function file %s: %w", f.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO agentworker_function_files (name, checksum) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`, f.Name, f.Checksum); err != nil {
			return nil, fmt.Errorf("record function file %s: %w", f.Name, err)
		}
		applied = append(applied, f.Name)
	}
	return applied, nil
}
