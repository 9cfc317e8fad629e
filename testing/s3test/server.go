package s3test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentworker/agentworker/storage"
)

const (
	// dirPattern names the data directories of started servers.
	dirPattern = "agentworker-s3test-*"
	// readyTimeout bounds how long a started server may take to answer.
	readyTimeout = 30 * time.Second
	// startAttempts bounds the retries when a server exits while starting,
	// typically because another process took one of its free ports.
	startAttempts = 3
)

// errNoServer reports that neither TEST_S3_ENDPOINT nor a minio binary is
// available.
var errNoServer = errors.New("no s3 server available")

// shared is the MinIO server of this test process, started by the first test
// that needs one. It is the package's only mutable state: a server takes
// seconds to start, so the tests of a process share it, the way database/sql
// shares its driver registry, and the sync.Once inside makes that safe.
var shared server

type server struct {
	once sync.Once
	cfg  storage.S3Config
	err  error
}

// config starts the server on first use and returns its config, without a
// bucket.
func (s *server) config() (storage.S3Config, error) {
	s.once.Do(func() { s.cfg, s.err = s.start() })
	return s.cfg, s.err
}

func (s *server) start() (storage.S3Config, error) {
	bin, err := findMinio()
	if err != nil {
		return storage.S3Config{}, err
	}
	sweepStale()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return storage.S3Config{}, fmt.Errorf("start minio: %w", err)
	}
	for attempt := 1; ; attempt++ {
		cfg, err := s.startOnce(bin, dir, attempt)
		if err == nil {
			return cfg, nil
		}
		if !errors.Is(err, errExited) || attempt == startAttempts {
			_ = os.RemoveAll(dir)
			return storage.S3Config{}, fmt.Errorf("start minio %s (attempt %d): %w", bin, attempt, err)
		}
	}
}

// errExited reports a server that exited before it was ready.
var errExited = errors.New("minio exited while starting")

func (s *server) startOnce(bin, dir string, attempt int) (storage.S3Config, error) {
	addr, err := freeAddr()
	if err != nil {
		return storage.S3Config{}, err
	}
	consoleAddr, err := freeAddr()
	if err != nil {
		return storage.S3Config{}, err
	}
	cfg := storage.S3Config{
		Endpoint:  addr,
		AccessKey: "s3test" + randomHex(6),
		SecretKey: randomHex(16),
	}
	logPath := filepath.Join(dir, fmt.Sprintf("minio-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return storage.S3Config{}, err
	}
	cmd := exec.Command(bin, "server", filepath.Join(dir, "data"),
		"--address", addr, "--console-address", consoleAddr, "--quiet")
	cmd.Env = append(withoutMinioEnv(os.Environ()),
		"MINIO_ROOT_USER="+cfg.AccessKey,
		"MINIO_ROOT_PASSWORD="+cfg.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	// Files, not pipes: exec starts no copying goroutines.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = dieWithParent()

	started := make(chan error, 1)
	exited := make(chan struct{})
	go s.supervise(cmd, started, exited)
	err = <-started
	_ = logFile.Close()
	if err != nil {
		return storage.S3Config{}, err
	}
	_ = os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	if err := waitReady(addr, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return storage.S3Config{}, fmt.Errorf("%w (log %s: %s)", err, logPath, logTail(logPath))
	}
	return cfg, nil
}

// supervise starts cmd and waits for it. The parent-death signal is sent
// when the thread that started the child exits, not the process, so the
// goroutine stays locked to that thread for the life of the server.
func (s *server) supervise(cmd *exec.Cmd, started chan<- error, exited chan<- struct{}) {
	runtime.LockOSThread()
	defer close(exited)
	err := cmd.Start()
	started <- err
	if err == nil {
		_ = cmd.Wait()
	}
}

// waitReady polls the liveness endpoint of the server at addr until it
// answers 200 without the "offline" status header that MinIO sets while its
// object layer is still initialising, the server exits, or readyTimeout
// passes.
func waitReady(addr string, exited <-chan struct{}) error {
	transport := &http.Transport{DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: time.Second}
	url := "http://" + addr + "/minio/health/live"
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && resp.Header.Get("X-Minio-Server-Status") != "offline" {
				return nil
			}
		}
		select {
		case <-exited:
			return errExited
		case <-deadline.C:
			return fmt.Errorf("minio at %s not live after %s", addr, readyTimeout)
		case <-tick.C:
		}
	}
}

// sweepStale removes the data directories of earlier runs whose server is
// gone. Directories without a pid file may belong to a server starting right
// now and are left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
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

// logTail returns the last lines of the log at path, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
