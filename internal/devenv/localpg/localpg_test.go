package localpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentworker/agentworker/testing/prereq"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start starts a cluster for the test and stops it in t.Cleanup. Without the
// server binaries the test is skipped, unless CI=true.
func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	c, err := Start(t.Context(), cfg)
	if errors.Is(err, ErrNotInstalled) {
		prereq.MissingFromMachine(t, "the PostgreSQL server (initdb, postgres)", "install the postgresql package", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), connString)
	if err != nil {
		t.Fatalf("connect to %s: %v", connString, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestStart(t *testing.T) {
	t.Parallel()

	c := start(t, Config{})
	ctx := t.Context()

	admin := connect(t, c.URL("postgres"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE probe"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	conn := connect(t, c.URL("probe"))
	var db, role string
	if err := conn.QueryRow(ctx, "SELECT current_database(), current_user").Scan(&db, &role); err != nil {
		t.Fatalf("query: %v", err)
	}
	if db != "probe" || role != "postgres" {
		t.Errorf("connected to database %q as %q, want probe as postgres", db, role)
	}
	// The benchmark splits an event's receipt at its commit time.
	if _, err := conn.Exec(ctx, "CREATE TABLE t (); INSERT INTO t DEFAULT VALUES"); err != nil {
		t.Fatal(err)
	}
	var committed bool
	if err := conn.QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) IS NOT NULL FROM t").Scan(&committed); err != nil || !committed {
		t.Errorf("commit timestamp of a committed row: %v (err %v); want one (track_commit_timestamp on)", committed, err)
	}

	if os.Geteuid() == 0 {
		t.Run("RunsAsPostgresUser", func(t *testing.T) {
			u, err := user.Lookup(osUser)
			if err != nil {
				t.Fatalf("look up %q: %v", osUser, err)
			}
			proc := fmt.Sprintf("/proc/%d", c.child.Pid())
			fi, err := os.Stat(proc)
			if err != nil {
				t.Fatalf("stat %s: %v", proc, err)
			}
			if got := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); got != u.Uid {
				t.Errorf("postgres runs as uid %s, want %s (%s)", got, u.Uid, osUser)
			}
		})
	}

	admin.Close(ctx)
	conn.Close(ctx)
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(c.tempDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s still there after Stop (stat: %v)", c.tempDir, err)
	}
	if err := ping(ctx, c.URL("postgres")); err == nil {
		t.Errorf("server still accepts connections after Stop")
	}
}

func TestStartReusesDir(t *testing.T) {
	t.Parallel()

	base := t.TempDir()
	// t.TempDir makes 0700 directories; as root, the postgres user must be
	// able to reach the data directory inside.
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("chmod %s: %v", d, err)
		}
	}
	dir := filepath.Join(base, "data")

	first := start(t, Config{Dir: dir})
	conn := connect(t, first.URL("postgres"))
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"); err != nil {
		t.Fatalf("write: %v", err)
	}
	conn.Close(t.Context())
	if err := first.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatalf("data directory not kept after Stop: %v", err)
	}

	second := start(t, Config{Dir: dir})
	var v string
	if err := connect(t, second.URL("postgres")).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v); err != nil {
		t.Fatalf("read after restart: %v", err)
	}
	if v != "hello" {
		t.Errorf("read %q after restart, want %q", v, "hello")
	}
}

func TestStartReportsLog(t *testing.T) {
	t.Parallel()

	// Hold the port so that postgres cannot bind it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	c, err := Start(t.Context(), Config{Port: port})
	if errors.Is(err, ErrNotInstalled) {
		prereq.MissingFromMachine(t, "the PostgreSQL server (initdb, postgres)", "install the postgresql package", err)
	}
	if err == nil {
		c.Stop(context.Background())
		t.Fatalf("Start on busy port %d succeeded", port)
	}
	if !strings.Contains(err.Error(), "postgres log") {
		t.Errorf("error does not carry the postgres log: %v", err)
	}
	t.Logf("expected error: %v", err)
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Parallel()

	_, err := Start(t.Context(), Config{BinDir: t.TempDir()})
	if !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Start with empty BinDir: got %v, want ErrNotInstalled", err)
	}
}

func TestVersionedBinDirs(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "13", "16"} {
		if err := os.MkdirAll(filepath.Join(root, v, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := versionedBinDirs(filepath.Join(root, "*", "bin"))
	var versions []string
	for _, d := range got {
		versions = append(versions, filepath.Base(filepath.Dir(d)))
	}
	if want := "16 15 13 9.6"; strings.Join(versions, " ") != want {
		t.Errorf("order %v, want %s", versions, want)
	}
}

func TestRemoveStaleTempDirs(t *testing.T) {
	t.Parallel()

	// A process id above the kernel's maximum (4194304) belongs to no process.
	stale, err := os.MkdirTemp("", tempPrefix+"99999999-*")
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", fmt.Sprintf("%s%d-*", tempPrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale); os.RemoveAll(live) })

	removeStaleTempDirs(slog.New(slog.NewTextHandler(t.Output(), nil)))

	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale directory %s not removed (stat: %v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("directory %s of a live process removed: %v", live, err)
	}
}
