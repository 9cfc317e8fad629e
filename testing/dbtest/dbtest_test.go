package dbtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/agentworker/agentworker/testing/prereq"
)

func TestMain(m *testing.M) {
	Main(m)
}

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), connString)
	if err != nil {
		t.Fatalf("connect to %s: %v", redact(connString), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// databaseExists asks the server's admin database whether name exists.
func databaseExists(t *testing.T, srv *server, name string) bool {
	t.Helper()
	var exists bool
	err := connect(t, srv.adminURL).QueryRow(t.Context(),
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatalf("look up database %s: %v", name, err)
	}
	return exists
}

func TestNewParallelTestsAreIsolated(t *testing.T) {
	t.Parallel()

	owners := []string{"First", "Second", "Third", "Fourth"}
	var (
		mu        sync.Mutex
		databases = map[string]bool{}
	)
	t.Cleanup(func() {
		if len(databases) != len(owners) {
			t.Errorf("%d parallel tests got %d databases: %v", len(owners), len(databases), databases)
		}
	})

	for _, owner := range owners {
		t.Run(owner, func(t *testing.T) {
			t.Parallel()

			pool := New(t)
			ctx := t.Context()

			var db string
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
				t.Fatalf("current_database: %v", err)
			}
			mu.Lock()
			databases[db] = true
			mu.Unlock()

			if _, err := pool.Exec(ctx, "CREATE TABLE probe (owner text)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
			if _, err := pool.Exec(ctx, "INSERT INTO probe VALUES ($1)", owner); err != nil {
				t.Fatalf("insert: %v", err)
			}
			rows, _ := pool.Query(ctx, "SELECT owner FROM probe")
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("select: %v", err)
			}
			if !slices.Equal(got, []string{owner}) {
				t.Errorf("probe holds %v, want only %q", got, owner)
			}
		})
	}
}

func TestNewWritesAreNotShared(t *testing.T) {
	t.Parallel()

	first, second := New(t), New(t)
	ctx := t.Context()

	if _, err := first.Exec(ctx, "CREATE TABLE probe (v int)"); err != nil {
		t.Fatalf("create table in first database: %v", err)
	}
	var found *string
	if err := second.QueryRow(ctx, "SELECT to_regclass('probe')::text").Scan(&found); err != nil {
		t.Fatalf("look up table in second database: %v", err)
	}
	if found != nil {
		t.Errorf("table created in the first database is visible in the second as %s", *found)
	}
}

func TestNewURL(t *testing.T) {
	t.Parallel()

	connString := NewURL(t)
	var db string
	if err := connect(t, connString).QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if !strings.HasPrefix(db, testPrefix) {
		t.Errorf("connected to %q, want a database named %s...", db, testPrefix)
	}
}

func TestDatabaseDroppedAfterCleanup(t *testing.T) {
	t.Parallel()

	srv := sharedServer(t)
	var name string
	t.Run("UseDatabase", func(t *testing.T) {
		pool := New(t)
		// A connection still open at cleanup must not keep the database alive.
		if _, err := connect(t, NewURL(t)).Exec(t.Context(), "SELECT 1"); err != nil {
			t.Fatalf("use second database: %v", err)
		}
		if err := pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if !databaseExists(t, srv, name) {
			t.Fatalf("database %s missing during the test", name)
		}
	})

	if name == "" {
		t.Fatal("subtest did not report its database")
	}
	if databaseExists(t, srv, name) {
		t.Errorf("database %s still exists after cleanup", name)
	}
}

func TestDropDeadDatabases(t *testing.T) {
	t.Parallel()

	srv := sharedServer(t)
	ctx := t.Context()
	create := func(tag string) string {
		t.Helper()
		name := testPrefix + tag + "_1"
		if _, err := connect(t, srv.adminURL).Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := srv.dropDatabase(context.Background(), name); err != nil {
				t.Error(err)
			}
		})
		return name
	}

	dead := create(newTag(0))
	liveTag := newTag(0)
	if _, err := connect(t, srv.adminURL).Exec(ctx, lockTagSQL, liveTag); err != nil {
		t.Fatalf("lock tag %s: %v", liveTag, err)
	}
	live := create(liveTag)

	if err := srv.dropDeadDatabases(ctx); err != nil {
		t.Fatalf("dropDeadDatabases: %v", err)
	}

	for name, want := range map[string]bool{dead: false, live: true, srv.template: true} {
		if got := databaseExists(t, srv, name); got != want {
			t.Errorf("database %s exists: %t, want %t", name, got, want)
		}
	}
}

func TestStartServerFromEnv(t *testing.T) {
	t.Parallel()

	t.Run("AdminURL", func(t *testing.T) {
		t.Parallel()

		adminURL := sharedServer(t).adminURL
		srv, err := startServer(t.Context(), func(key string) string {
			return map[string]string{"TEST_DATABASE_URL": adminURL}[key]
		})
		if err != nil {
			t.Fatalf("startServer: %v", err)
		}
		if srv.name != "TEST_DATABASE_URL" {
			t.Errorf("picked %s, want TEST_DATABASE_URL", srv.name)
		}
		if err := srv.close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		if databaseExists(t, sharedServer(t), srv.template) {
			t.Errorf("template %s still exists after close", srv.template)
		}
	})

	t.Run("NotAURL", func(t *testing.T) {
		t.Parallel()

		_, err := startServer(t.Context(), func(key string) string {
			return map[string]string{"TEST_DATABASE_URL": "host=localhost dbname=postgres"}[key]
		})
		if err == nil || errors.Is(err, errNoServer) {
			t.Errorf("startServer with a keyword/value TEST_DATABASE_URL: got %v, want a configuration error", err)
		}
	})
}

func TestPrivateCluster(t *testing.T) {
	t.Parallel()

	b, err := startPrivateCluster(t.Context())
	if errors.Is(err, localpg.ErrNotInstalled) {
		prereq.MissingFromMachine(t, "the PostgreSQL server (initdb, postgres)", "install the postgresql package", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(t.Context(), b)
	if err != nil {
		b.stop(context.Background())
		t.Fatalf("newServer: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})

	name, err := srv.createDatabaseFrom(t.Context(), srv.template)
	if err != nil {
		t.Fatal(err)
	}
	var db string
	if err := connect(t, srv.url(name)).QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	if db != name {
		t.Errorf("connected to %q, want %q", db, name)
	}
	if err := srv.dropDatabase(t.Context(), name); err != nil {
		t.Error(err)
	}
}

func TestDatabaseURL(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, adminURL, want string
	}{
		{"Plain", "postgres://postgres@127.0.0.1:5432/postgres", "postgres://postgres@127.0.0.1:5432/x"},
		{"Query", "postgresql://u:p@h:1/admin?sslmode=disable", "postgresql://u:p@h:1/x?sslmode=disable"},
		{"NoDatabase", "postgres://h", "postgres://h/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := databaseURL(tc.adminURL, "x")
			if err != nil || got != tc.want {
				t.Errorf("databaseURL(%q) = %q, %v; want %q", tc.adminURL, got, err, tc.want)
			}
		})
	}
}
