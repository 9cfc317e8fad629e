// Package dbtest gives each test a real PostgreSQL database of its own: fresh,
// migrated with agentsql.Migrate, and dropped when the test ends.
//
// # Where the server comes from
//
// The first New or NewURL in a test process picks a server, in this order:
//
//  1. TEST_DATABASE_URL, a postgres:// URL of a role allowed to CREATE
//     DATABASE; if it is set, it is used and nothing else is tried;
//  2. the local server postgres://postgres@127.0.0.1:5432/postgres, if it
//     accepts a connection within 2 s;
//  3. a postgres:15-alpine container (testcontainers), if a Docker engine is
//     reachable;
//  4. a private cluster (package localpg), if the PostgreSQL server binaries
//     are installed.
//
// If there is none, the test is skipped, or fails when CI=true.
//
// # Speed
//
// The process creates one template database, agentworker_tmpl_<tag>, and
// migrates it once; each test database, agentworker_test_<tag>_<n>, is a copy
// (CREATE DATABASE ... TEMPLATE), which takes milliseconds. Nothing stays
// connected to the template, and the copies are made one at a time, as
// PostgreSQL requires.
//
// # Cleanup
//
// Each test's database is dropped (WITH (FORCE)) in t.Cleanup. The <tag> in
// every name is the process id and a random suffix; the process holds a
// session advisory lock on it while it runs. Call Main from TestMain: after the
// tests it drops the template, stops a container or private cluster, and
// checks for leaked goroutines. If a process dies before that, the next
// process that starts on the same server drops the databases whose tag is no
// longer locked (and that the role owns). Advisory locks belong to one
// database, so this relies on every process connecting to the same database of
// the server (the one in the URL); that holds for the defaults.
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/prereq"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// shared is the server of this test process, set up by the first New or
// NewURL. It is the package's one piece of mutable state, guarded by once: a
// server and a migrated template per test, rather than per process, would make
// every test pay for a migration.
var shared struct {
	once sync.Once
	srv  *server
	err  error
}

// setupTimeout bounds picking and preparing the server, which may mean pulling
// a container image.
const setupTimeout = 5 * time.Minute

// New returns a pool connected to a fresh, migrated database that only this
// test uses. The pool is closed and the database dropped in t.Cleanup.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()

	connString := NewURL(t)
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("dbtest: parse %s: %v", connString, err)
	}
	agentsql.ConfigurePool(cfg) // as the worker's pools are
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("dbtest: open pool on %s: %v", connString, err)
	}
	t.Cleanup(pool.Close) // runs before NewURL's cleanup drops the database
	return pool
}

// NewURL returns the connection string of a fresh, migrated database that
// only this test uses, for code that opens its own connections (a River
// client, a subprocess). The database is dropped in t.Cleanup, whoever is
// still connected to it.
func NewURL(t testing.TB) string {
	t.Helper()
	srv := sharedServer(t)
	return newDatabase(t, srv, srv.template)
}

// NewEmptyURL is NewURL for a database with no schema of ours or River's,
// for tests of the migrations themselves.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, sharedServer(t), "template0")
}

func newDatabase(t testing.TB, srv *server, template string) string {
	t.Helper()
	name, err := srv.createDatabaseFrom(t.Context(), template)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is done by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.dropDatabase(ctx, name); err != nil {
			t.Errorf("dbtest: %v", err)
		}
	})
	return srv.url(name)
}

// sharedServer returns the process's server, setting it up on first use. It
// skips the test when no server is available, unless CI=true.
func sharedServer(t testing.TB) *server {
	t.Helper()

	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		shared.srv, shared.err = startServer(ctx, os.Getenv)
	})
	switch {
	case shared.err == nil && shared.srv == nil:
		t.Fatal("dbtest: New called after Main finished the tests")
	case errors.Is(shared.err, errNoServer):
		prereq.MissingFromMachine(t, "PostgreSQL (a server to reach or its binaries)", "install the postgresql package", shared.err)
	case shared.err != nil:
		t.Fatalf("dbtest: %v", shared.err)
	}
	return shared.srv
}

// Main runs the tests of a package that uses dbtest and exits; call it from
// TestMain. After the tests it drops this process's template database, stops
// the container or private cluster if there is one, and then, if the tests
// passed, fails the run if goroutines leaked (goleak.Find with opts).
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()

	shared.once.Do(func() {}) // no server from here on
	if srv := shared.srv; srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := srv.close(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
			code = max(code, 1)
		}
		opts = append(opts, srv.leakOptions...)
	}

	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
