// Package localminio runs a private MinIO server as a child process: the S3
// store of `agentworker bench` and of the tests (through testing/s3test) when
// no other server is configured.
//
// It uses the minio binary installed on the machine (see FindBinary) and
// downloads nothing. The server listens on 127.0.0.1 only, on ports chosen by
// the kernel, with random root credentials, no web console and no update
// checks. Variables MINIO_* of the calling process are not passed on, so they
// cannot change how it runs.
//
// The minio process is a direct child, not a daemon (internal/devenv/supervise):
// on Linux it gets SIGKILL when the parent dies, so a crashed process does not
// leave a server behind. Elsewhere it can outlive a parent that is killed.
package localminio

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/internal/devenv/supervise"
	"github.com/agentworker/agentworker/internal/devenv/toolbin"
	"github.com/agentworker/agentworker/storage"
)

// ErrNotInstalled is returned, wrapped, by FindBinary and Start when no minio
// binary can be found.
var ErrNotInstalled = errors.New("minio binary not found")

const (
	// tempPattern names the temporary directories Start creates.
	tempPattern = "agentworker-minio-*"
	// pidName is the file in a temporary directory that holds the process id
	// of its owner, the process that called Start, so that a later Start can
	// tell whether the directory is abandoned. It is the owner's, not the
	// server's: between two attempts no server runs, and a sweep that judged
	// by the server would remove the directory the next attempt starts in.
	// The server dies with its owner (dieWithParent).
	pidName = "pid"
	// logName is the file in the directory that receives the server's output.
	logName = "minio.log"
	// dataName is the directory under the directory that holds the objects.
	dataName = "data"
	// readyTimeout bounds how long Start waits for a started server to be live.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long Stop waits for a graceful shutdown before it
	// kills the server.
	stopTimeout = 30 * time.Second
	// startAttempts bounds the retries when a server exits while starting,
	// typically because another process took one of its free ports.
	startAttempts = 3
)

// errPortTaken reports a server that could not listen on its port. MinIO
// logs this and may stay up for long without serving, so it is read from
// its log rather than waited out.
var errPortTaken = errors.New("minio could not listen on its port")

// listenFailure is what MinIO logs when its port is taken.
var listenFailure = []byte("Unable to listen on")

// Config configures Start. The zero value starts a throwaway server.
type Config struct {
	// Bin is the path of the minio binary.
	//
	// Defaults to the result of FindBinary.
	Bin string

	// Dir holds the server's files: the objects in Dir/data and the server's
	// output in Dir/minio.log. Objects there from an earlier server are served
	// again. Stop leaves the directory in place.
	//
	// Defaults to a new temporary directory named agentworker-minio-*, which
	// Stop removes. Temporary directories of servers that are gone (their
	// parent was killed) are removed by the next Start that creates one.
	Dir string

	// Logger receives lifecycle messages (ready, retried, stopped).
	//
	// Defaults to discarding them.
	Logger *slog.Logger

	// freePort picks the ports of each attempt; tests hand out a taken one.
	freePort func() (int, error)
}

// Server is a running MinIO server started by Start.
type Server struct {
	cfg      storage.S3Config
	dir      string
	tempDir  string // removed by Stop; empty when Config.Dir was given
	logPath  string
	logger   *slog.Logger
	freePort func() (int, error)

	// Set by each start attempt; an attempt that fails has seen it exit
	// before the next one begins.
	child *supervise.Child

	stopOnce sync.Once
	stopErr  error
}

// FindBinary returns the path of the minio binary: MINIO_BIN if set, else
// minio on PATH, else in $GOBIN, $GOPATH/bin (the first GOPATH entry) or
// $HOME/go/bin, where `go install github.com/minio/minio@...` puts it. The
// error wraps ErrNotInstalled when there is none; a MINIO_BIN naming a
// missing file is a configuration error, which does not.
func FindBinary() (string, error) {
	return toolbin.Find("minio", "MINIO_BIN", ErrNotInstalled)
}

// Start starts a MinIO server as described by cfg and returns once it is live
// and its object layer is online (at most 30 s after starting it). A server
// that exits while starting, typically because another process took one of
// its ports, is started again on new ports, up to three times. If it does not
// come up, the error carries the tail of its output. ctx bounds the start, not
// the life of the server: call Stop.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s := &Server{logger: cfg.Logger, freePort: cfg.freePort}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.freePort == nil {
		s.freePort = loopback.FreePort
	}
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}

	if cfg.Dir == "" {
		sweepStale(s.logger)
		var err error
		if s.tempDir, err = os.MkdirTemp("", tempPattern); err != nil {
			return nil, fmt.Errorf("create temporary directory for minio: %w", err)
		}
		s.dir = s.tempDir
		if err := os.WriteFile(filepath.Join(s.dir, pidName), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			_ = os.RemoveAll(s.tempDir)
			return nil, fmt.Errorf("record the owner of %s: %w", s.tempDir, err)
		}
	} else {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("create minio directory %s: %w", cfg.Dir, err)
		}
		s.dir = cfg.Dir
	}
	s.logPath = filepath.Join(s.dir, logName)

	for attempt := 1; ; attempt++ {
		err := s.start(ctx, bin)
		if err == nil {
			s.logger.Info("minio ready", "endpoint", s.cfg.Endpoint, "dir", s.dir, "pid", s.child.Pid())
			return s, nil
		}
		if !(errors.Is(err, supervise.ErrExited) || errors.Is(err, errPortTaken)) || attempt == startAttempts {
			err = fmt.Errorf("start minio %s in %s (attempt %d): %w", bin, s.dir, attempt, err)
			if s.tempDir != "" {
				if rmErr := os.RemoveAll(s.tempDir); rmErr != nil {
					err = errors.Join(err, fmt.Errorf("remove temporary directory %s: %w", s.tempDir, rmErr))
				}
			}
			return nil, err
		}
		s.logger.Warn("minio did not come up; retrying on other ports", "dir", s.dir, "attempt", attempt, "err", err)
	}
}

// start runs one attempt: it starts minio on free ports and waits until it is
// live. On failure no process is left running.
func (s *Server) start(ctx context.Context, bin string) error {
	port, err := s.freePort()
	if err != nil {
		return err
	}
	consolePort, err := s.freePort()
	if err != nil {
		return err
	}
	addr, consoleAddr := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", consolePort)
	s.cfg = storage.S3Config{
		Endpoint:  addr,
		AccessKey: "localminio" + randomHex(6),
		SecretKey: randomHex(16),
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open minio log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	// This attempt's output starts here; earlier attempts' is above.
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("find the end of minio log: %w", err)
	}

	cmd := exec.Command(bin, "server", filepath.Join(s.dir, dataName),
		"--address", addr, "--console-address", consoleAddr, "--quiet")
	cmd.Env = append(withoutMinioEnv(os.Environ()),
		"MINIO_ROOT_USER="+s.cfg.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.cfg.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	// Files, not pipes: exec starts no copying goroutines.
	cmd.Stdout, cmd.Stderr = logFile, logFile

	if s.child, err = supervise.Start(cmd); err != nil {
		return fmt.Errorf("run minio: %w", err)
	}
	portTaken := func() bool { return s.logSince(logStart, listenFailure) }
	if err := s.waitReady(ctx, addr, portTaken); err != nil {
		s.child.Kill()
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

// waitReady polls the liveness endpoint of the server at addr until it
// answers 200 without the "offline" status header that MinIO sets while its
// object layer is still initialising, the server exits or says its port is
// taken, ctx is done, or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context, addr string, portTaken func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	transport := &http.Transport{DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: time.Second}
	url := "http://" + addr + "/minio/health/live"
	err := s.child.WaitReady(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		err := probe(ctx, client, url)
		if err != nil && portTaken() {
			return supervise.Permanent(fmt.Errorf("%w: %s", errPortTaken, addr))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("minio at %s not live: %w", addr, err)
	}
	return nil
}

// probe asks the liveness endpoint at url once.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	if resp.Header.Get("X-Minio-Server-Status") == "offline" {
		return errors.New("object layer offline")
	}
	return nil
}

// Config returns the endpoint and root credentials of the server, without a
// bucket: set Bucket before passing it to storage.NewS3.
func (s *Server) Config() storage.S3Config {
	return s.cfg
}

// Pid is the server process's id.
func (s *Server) Pid() int { return s.child.Pid() }

// Stop shuts the server down (SIGTERM) and waits for it to exit. If it has
// not exited when ctx is done or after 30 s, Stop kills it. Then it removes
// the directory if Start created it. Calling Stop again returns the result of
// the first call.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()

	var errs []error
	select {
	case <-s.child.Exited():
		errs = append(errs, fmt.Errorf("minio in %s exited before Stop: %v\n%s", s.dir, s.child.Err(), s.logTail()))
	default:
		if err := s.child.Stop(ctx, syscall.SIGTERM); err != nil {
			if errors.Is(err, supervise.ErrKilled) {
				s.logger.Warn("minio did not shut down in time; killed it", "dir", s.dir, "pid", s.child.Pid())
			}
			errs = append(errs, fmt.Errorf("shut down minio in %s: %w\n%s", s.dir, err, s.logTail()))
		}
	}

	if s.tempDir != "" {
		if err := os.RemoveAll(s.tempDir); err != nil {
			errs = append(errs, fmt.Errorf("remove temporary directory %s: %w", s.tempDir, err))
		}
	}
	s.logger.Info("minio stopped", "endpoint", s.cfg.Endpoint, "dir", s.dir)
	return errors.Join(errs...)
}

// sweepStale removes the temporary directories whose owner is gone.
// Directories without a pid file may have been created a moment ago and are
// left alone. Failures are logged: they must not keep a new server
// from starting.
func sweepStale(logger *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern)) // the pattern is well formed
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, pidName))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || supervise.Running(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.Warn("could not remove stale minio directory", "dir", dir, "error", err)
			continue
		}
		logger.Info("removed stale minio directory", "dir", dir, "pid", pid)
	}
}

// withoutMinioEnv drops MINIO_* variables, which would change how the
// server runs.
func withoutMinioEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "MINIO_") {
			out = append(out, kv)
		}
	}
	return out
}

// logSince reports whether the server's output from offset on holds text.
func (s *Server) logSince(offset int64, text []byte) bool {
	f, err := os.Open(s.logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	return err == nil && bytes.Contains(b, text)
}

// logTail returns the end of the server's output, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no minio log: %v)", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Sprintf("minio log %s:\n%s", s.logPath, b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
