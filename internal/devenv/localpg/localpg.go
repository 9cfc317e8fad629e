// Package localpg runs a private PostgreSQL cluster as a child process: the
// embedded default database of `agentworker demo`, and the last resort of the
// test helpers when no other server is reachable.
//
// It uses the PostgreSQL server binaries installed on the machine (initdb and
// postgres) and downloads nothing. The server listens on 127.0.0.1 only, trusts
// every local connection and runs without fsync: it is for demos and tests, not
// for data that must survive a crash of the machine.
//
// PostgreSQL refuses to run as root. When the calling process is root, initdb
// and postgres run as the "postgres" OS user, which then owns the data
// directory and must be able to reach it (its parent directories must be
// searchable by that user).
//
// The postgres process is a direct child, not a daemon (internal/devenv/supervise):
// it gets SIGKILL if the parent dies (Linux parent-death signal), so a crashed
// test binary does not leave a server behind, and it runs in its own process
// group, so a Ctrl-C in the terminal reaches the parent, which decides when to
// call Stop.
package localpg

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/internal/devenv/supervise"
	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled is returned by Start when the PostgreSQL server binaries
// (initdb and postgres) cannot be found.
var ErrNotInstalled = errors.New("postgresql server binaries (initdb, postgres) not found")

const (
	// readyTimeout bounds how long Start waits for a started server to accept
	// connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long Stop waits for a fast shutdown before it
	// kills the server.
	stopTimeout = 30 * time.Second
	// osUser is the OS user the cluster runs as when the caller is root.
	osUser = "postgres"
	// logName is the file in the data directory that receives the server's
	// output.
	logName = "localpg.log"
	// tempPrefix starts the name of every temporary directory Start creates;
	// the creating process id follows, so leftovers of dead processes can be
	// recognized and removed.
	tempPrefix = "localpg-"
	// maxSocketPath is the longest Unix socket path Linux accepts
	// (sizeof(sun_path) - 1).
	maxSocketPath = 107
)

// Config configures Start. The zero value starts a throwaway cluster.
type Config struct {
	// Dir is the data directory. If it holds no cluster yet (no PG_VERSION
	// file), Start creates one with initdb; otherwise Start reuses it. When the
	// caller is root, Start hands the directory over to the postgres OS user
	// (chown -R). Stop leaves it in place.
	//
	// Defaults to a new temporary directory, which Stop removes. Temporary
	// directories left behind by processes that died are removed by the next
	// Start that creates one.
	Dir string

	// Port is the TCP port the server listens on, on 127.0.0.1.
	//
	// Defaults to a free port chosen by the kernel.
	Port int

	// BinDir is the directory holding initdb and postgres.
	//
	// Defaults to the directory of postgres on PATH (symlinks resolved), else
	// the highest version of /usr/lib/postgresql/*/bin.
	BinDir string

	// Durable keeps synchronous_commit on: a commit is in the WAL before it
	// returns, so a crash of the server (SIGQUIT, as a crash test does)
	// loses no commit a client saw. Off by default, for speed: a crash
	// then loses the last commits, which a test of crash recovery must not
	// allow.
	Durable bool

	// Logger receives lifecycle messages (initdb, ready, stopped).
	//
	// Defaults to discarding them.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start. Its superuser is
// postgres, with trust authentication on 127.0.0.1.
type Cluster struct {
	port    int
	dataDir string
	tempDir string // removed by Stop; empty when Config.Dir was given
	logPath string
	logger  *slog.Logger
	durable bool
	child   *supervise.Child

	stopOnce sync.Once
	stopErr  error
}

// Start starts a PostgreSQL server as described by cfg and returns once it
// accepts connections (at most 30 s after starting it). If the server does not
// come up, the error carries the tail of its log. ctx bounds the start, not the
// life of the server: call Stop.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	binDir, err := findBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}

	c := &Cluster{logger: logger, durable: cfg.Durable}
	if cfg.Dir == "" {
		removeStaleTempDirs(logger)
		c.tempDir, err = os.MkdirTemp("", fmt.Sprintf("%s%d-*", tempPrefix, os.Getpid()))
		if err != nil {
			return nil, fmt.Errorf("create temporary directory for the cluster: %w", err)
		}
		c.dataDir = filepath.Join(c.tempDir, "data")
	} else {
		c.dataDir, err = filepath.Abs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("resolve data directory %q: %w", cfg.Dir, err)
		}
	}
	c.logPath = filepath.Join(c.dataDir, logName)

	if err := c.start(ctx, binDir, cfg.Port, cred); err != nil {
		if c.tempDir != "" {
			if rmErr := os.RemoveAll(c.tempDir); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("remove temporary directory %s: %w", c.tempDir, rmErr))
			}
		}
		return nil, err
	}
	return c, nil
}

// start prepares the data directory, runs initdb if needed, starts postgres
// and waits until it accepts connections. On failure no process is left
// running.
func (c *Cluster) start(ctx context.Context, binDir string, port int, cred *syscall.Credential) error {
	if err := prepareDir(c.dataDir, c.tempDir, cred); err != nil {
		return err
	}

	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := c.initdb(ctx, binDir, cred); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("inspect data directory %s: %w", c.dataDir, err)
	}

	if port == 0 {
		var err error
		if port, err = loopback.FreePort(); err != nil {
			return err
		}
	}
	c.port = port

	if err := c.spawn(binDir, cred); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		c.child.Kill()
		return fmt.Errorf("start postgres in %s on port %d: %w\n%s", c.dataDir, c.port, err, c.logTail())
	}
	c.logger.Info("postgres ready", "data_dir", c.dataDir, "port", c.port, "pid", c.child.Pid())
	return nil
}

func (c *Cluster) initdb(ctx context.Context, binDir string, cred *syscall.Credential) error {
	c.logger.Info("initializing cluster", "data_dir", c.dataDir)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", c.dataDir,
		"-U", "postgres",
		"--auth=trust",
		"-E", "UTF8",
		"--no-locale",
		"--no-sync",
	)
	cmd.Dir = "/" // the caller's working directory may not be readable by the postgres user
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.dataDir, err, tail(out))
	}
	return nil
}

// spawn starts postgres in the background, its output going to the log file.
func (c *Cluster) spawn(binDir string, cred *syscall.Credential) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open postgres log %s: %w", c.logPath, err)
	}
	defer logFile.Close() // the child has its own descriptor
	if cred != nil {
		if err := logFile.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("chown postgres log %s: %w", c.logPath, err)
		}
	}

	// The Unix socket goes into the data directory (psql -h <dir> works), unless
	// the path would be too long for a socket; TCP is enough for us.
	socketDir := c.dataDir
	if len(socketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		socketDir = ""
	}

	syncCommit := "off"
	if c.durable {
		syncCommit = "on"
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"),
		"-D", c.dataDir,
		"-p", strconv.Itoa(c.port),
		"-k", socketDir,
		"-c", "listen_addresses=127.0.0.1",
		// Without fsync a crash of the machine may lose data, a crash of
		// the server does not: what was written is in the page cache.
		"-c", "fsync=off",
		"-c", "synchronous_commit="+syncCommit,
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		// Commit times, so a benchmark can tell a write's own time from
		// what comes after its commit (pg_xact_commit_timestamp).
		"-c", "track_commit_timestamp=on",
	)
	cmd.Dir = "/"
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if c.child, err = supervise.Start(cmd); err != nil {
		return fmt.Errorf("run postgres for %s: %w", c.dataDir, err)
	}
	return nil
}

// waitReady polls until the server accepts a connection, it exits, or the
// deadline passes.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := c.child.WaitReady(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		return ping(ctx, c.URL("postgres"))
	})
	if err != nil {
		return fmt.Errorf("postgres not accepting connections: %w", err)
	}
	return nil
}

func ping(ctx context.Context, connString string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// URL returns the connection string of database on the cluster, as the
// postgres superuser.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(database))
}

// Stop shuts the server down (fast shutdown: open sessions are ended) and
// waits for it to exit. If it has not exited when ctx is done or after 30 s,
// Stop kills it. Then it removes the data directory if Start created it.
// Calling Stop again returns the result of the first call.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *Cluster) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()

	var errs []error
	select {
	case <-c.child.Exited():
		if err := c.child.Err(); err != nil {
			errs = append(errs, fmt.Errorf("postgres in %s exited before Stop: %w\n%s", c.dataDir, err, c.logTail()))
		}
	default:
		// SIGINT is postgres's fast shutdown: open sessions are ended.
		if err := c.child.Stop(ctx, syscall.SIGINT); err != nil {
			if errors.Is(err, supervise.ErrKilled) {
				c.logger.Warn("postgres did not shut down in time; killed it", "data_dir", c.dataDir, "pid", c.child.Pid())
			}
			errs = append(errs, fmt.Errorf("shut down postgres in %s: %w\n%s", c.dataDir, err, c.logTail()))
		}
	}

	if c.tempDir != "" {
		if err := os.RemoveAll(c.tempDir); err != nil {
			errs = append(errs, fmt.Errorf("remove temporary directory %s: %w", c.tempDir, err))
		}
	}
	c.logger.Info("postgres stopped", "data_dir", c.dataDir, "port", c.port)
	return errors.Join(errs...)
}

// logTail returns the last lines of the server log, for error messages.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no postgres log: %v)", err)
	}
	return fmt.Sprintf("postgres log %s:\n%s", c.logPath, tail(b))
}

// tail returns the last 20 lines of out.
func tail(out []byte) string {
	lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// findBinDir returns the directory holding initdb and postgres.
func findBinDir(dir string) (string, error) {
	var candidates []string
	if dir != "" {
		candidates = []string{dir}
	} else {
		if p, err := exec.LookPath("postgres"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				candidates = append(candidates, filepath.Dir(real))
			}
			candidates = append(candidates, filepath.Dir(p))
		}
		candidates = append(candidates, versionedBinDirs("/usr/lib/postgresql/*/bin")...)
	}
	for _, d := range candidates {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if len(candidates) == 0 {
		return "", fmt.Errorf("%w: none on PATH or in /usr/lib/postgresql/*/bin", ErrNotInstalled)
	}
	return "", fmt.Errorf("%w in %s", ErrNotInstalled, strings.Join(candidates, ", "))
}

// versionedBinDirs returns the directories matching pattern, whose parent is
// named for a version such as 15 or 9.6, highest version first.
func versionedBinDirs(pattern string) []string {
	dirs, _ := filepath.Glob(pattern) // the pattern is constant and well formed
	version := func(d string) []int {
		var v []int
		for _, part := range strings.Split(filepath.Base(filepath.Dir(d)), ".") {
			n, _ := strconv.Atoi(part) // not a number sorts as 0
			v = append(v, n)
		}
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return cmp.Or(slices.Compare(version(b), version(a)), strings.Compare(a, b))
	})
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// credential returns the identity to run initdb and postgres as: nil (the
// caller's) unless the caller is root, which PostgreSQL refuses to run as.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, which postgres refuses: look up OS user %q to run it as: %w", osUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid %q of OS user %q: %w", u.Uid, osUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid %q of OS user %q: %w", u.Gid, osUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir creates the data directory and, when running as another user,
// gives it (and the temporary directory around it) to that user.
func prepareDir(dataDir, tempDir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory %s: %w", dataDir, err)
	}
	if cred == nil {
		return nil
	}
	root := cmp.Or(tempDir, dataDir)
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("hand %s over to OS user %q: %w", root, osUser, err)
	}
	return nil
}

// removeStaleTempDirs removes the temporary directories of Start calls in
// processes that no longer exist. Their servers died with them (parent-death
// signal), but nothing removed the directories. Failures are logged: they
// must not keep a new cluster from starting.
func removeStaleTempDirs(logger *slog.Logger) {
	pattern := filepath.Join(os.TempDir(), tempPrefix+"*")
	dirs, _ := filepath.Glob(pattern) // the pattern is well formed
	for _, dir := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), tempPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.Warn("could not remove stale cluster directory", "dir", dir, "error", err)
			continue
		}
		logger.Info("removed stale cluster directory", "dir", dir, "pid", pid)
	}
}

// processExists reports whether a process with this id exists, in this PID
// namespace.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
