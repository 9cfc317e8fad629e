package localminio

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/internal/devenv/supervise"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/prereq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start starts a server for the test and stops it in t.Cleanup. Without the
// minio binary the test is skipped (fails with CI=true).
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := Start(t.Context(), cfg)
	if errors.Is(err, ErrNotInstalled) {
		prereq.Missing(t, "MinIO", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// roundTrip writes an object through storage.NewS3 on bucket and reads it
// back.
func roundTrip(t *testing.T, s *Server, bucket string) {
	t.Helper()
	ctx := t.Context()
	cfg := s.Config()
	cfg.Bucket = bucket
	store, err := storage.NewS3(ctx, cfg)
	if err != nil {
		t.Fatalf("NewS3(%s): %v", cfg, err)
	}
	defer store.Close()
	want := []byte("hello\x00minio")
	if _, err := store.Write(ctx, "project", "dir/file.bin", want); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, _, err := store.Read(ctx, "project", "dir/file.bin")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Read = %q, want %q", got, want)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})

	cfg := s.Config()
	if cfg.Bucket != "" || cfg.UseSSL || cfg.AccessKey == "" || cfg.SecretKey == "" {
		t.Errorf("Config() = %s; want credentials, no bucket, no SSL", cfg)
	}
	roundTrip(t, s, "probe")

	if s.tempDir == "" {
		t.Fatal("no temporary directory for Config{Dir: \"\"}")
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(s.tempDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(%s) after Stop: %v; want not exist", s.tempDir, err)
	}
}

func TestStartDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "minio")

	first := start(t, Config{Dir: dir})
	roundTrip(t, first, "kept")
	if err := first.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	second := start(t, Config{Dir: dir})
	cfg := second.Config()
	cfg.Bucket = "kept"
	store, err := storage.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	defer store.Close()
	if _, _, err := store.Read(t.Context(), "project", "dir/file.bin"); err != nil {
		t.Errorf("Read from the second server on the same Dir: %v", err)
	}
	if err := second.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, logName)); err != nil {
		t.Errorf("Stop removed a given Dir: %v", err)
	}
}

func TestStopAfterExit(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	s.child.Kill()
	if err := s.Stop(t.Context()); err == nil {
		t.Error("Stop after the server died = nil, want an error")
	}
	if _, err := os.Stat(s.tempDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(%s) after Stop: %v; want not exist", s.tempDir, err)
	}
}

func TestStartBadBin(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "minio")
	_, err := Start(t.Context(), Config{Bin: bin, Dir: dir})
	if !errors.Is(err, supervise.ErrExited) {
		t.Fatalf("Start with a failing binary = %v, want supervise.ErrExited", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("broken")) {
		t.Errorf("Start error %q does not carry the server's output", err)
	}
}

func TestSweepStale(t *testing.T) {
	t.Parallel()
	mk := func(pid string) string {
		t.Helper()
		dir, err := os.MkdirTemp("", tempPattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if pid != "" {
			if err := os.WriteFile(filepath.Join(dir, pidName), []byte(pid), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	alive := mk(strconv.Itoa(os.Getpid()))
	starting := mk("")
	dead := mk("2147483646") // above any pid_max

	sweepStale(slog.New(slog.NewTextHandler(t.Output(), nil)))

	for _, dir := range []string{alive, starting} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("sweepStale removed %s: %v", dir, err)
		}
	}
	if _, err := os.Stat(dead); supervise.Running(2147483646) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(%s) of a directory whose owner is gone, after sweepStale: %v; want not exist", dead, err)
	}
}

func TestWithoutMinioEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "Empty", in: nil, want: []string{}},
		{name: "KeepsOthers", in: []string{"HOME=/root", "PATH=/bin"}, want: []string{"HOME=/root", "PATH=/bin"}},
		{name: "DropsMinio", in: []string{"MINIO_VOLUMES=/x", "HOME=/root", "MINIO_ROOT_USER=u"}, want: []string{"HOME=/root"}},
		{name: "KeepsLookalikes", in: []string{"XMINIO_A=1", "minio_b=2"}, want: []string{"XMINIO_A=1", "minio_b=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := withoutMinioEnv(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("withoutMinioEnv(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestFindBinary changes the environment, so it cannot run in parallel.
func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "minio")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("MinioBin", func(t *testing.T) {
		t.Setenv("MINIO_BIN", bin)
		if got, err := FindBinary(); err != nil || got != bin {
			t.Errorf("FindBinary() = %q, %v; want %q", got, err, bin)
		}
	})

	t.Run("MinioBinMissing", func(t *testing.T) {
		t.Setenv("MINIO_BIN", filepath.Join(dir, "absent"))
		if _, err := FindBinary(); err == nil || errors.Is(err, ErrNotInstalled) {
			t.Errorf("FindBinary() = %v; want an error that is not ErrNotInstalled", err)
		}
	})

	t.Run("GOBIN", func(t *testing.T) {
		t.Setenv("MINIO_BIN", "")
		t.Setenv("PATH", "")
		t.Setenv("GOBIN", dir)
		if got, err := FindBinary(); err != nil || got != bin {
			t.Errorf("FindBinary() = %q, %v; want %q", got, err, bin)
		}
	})

	t.Run("Nowhere", func(t *testing.T) {
		t.Setenv("MINIO_BIN", "")
		t.Setenv("PATH", "")
		t.Setenv("GOBIN", "")
		t.Setenv("GOPATH", dir)
		t.Setenv("HOME", dir)
		_, err := FindBinary()
		if !errors.Is(err, ErrNotInstalled) {
			t.Errorf("FindBinary() = %v, want ErrNotInstalled", err)
		}
		if _, err := Start(t.Context(), Config{}); !errors.Is(err, ErrNotInstalled) {
			t.Errorf("Start() = %v, want ErrNotInstalled", err)
		}
	})
}

// TestStartRetriesWhenItsPortIsTaken: MinIO refuses a port taken when it
// starts; Start tries again on other ports.
func TestStartRetriesWhenItsPortIsTaken(t *testing.T) {
	t.Parallel()
	freePort, _, taken := takenPortFirst(t, 1)
	s := start(t, Config{freePort: freePort})
	if s.Config().Endpoint == taken {
		t.Fatalf("server endpoint %s is the taken port", s.Config().Endpoint)
	}
	roundTrip(t, s, "retried")
}

// takenPortFirst returns a port picker whose first n picks are a port a
// listener of the test holds (returned as an address), then free ports, and
// the count of its picks.
func takenPortFirst(t *testing.T, n int32) (freePort func() (int, error), picks *atomic.Int32, taken string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	picks = new(atomic.Int32)
	return func() (int, error) {
		if picks.Add(1) <= n {
			return port, nil
		}
		return loopback.FreePort()
	}, picks, l.Addr().String()
}

// TestSweepSparesARetryingStart: another process's Start sweeps abandoned
// directories while this one retries. Between two attempts no server runs;
// a sweep that judged the directory by its server's pid removed it then,
// and the next attempt failed to open its log (seen in CI: "open minio log:
// no such file or directory"). The directory is its owner's: never swept
// while the owner lives.
func TestSweepSparesARetryingStart(t *testing.T) {
	t.Parallel()
	// Both ports of the first attempt: it fails at once.
	freePort, picks, _ := takenPortFirst(t, 2)
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() { // another process's Starts, as often as they can come
		defer close(swept)
		for {
			select {
			case <-stop:
				return
			default:
				sweepStale(slog.New(slog.DiscardHandler))
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-swept })
	s := start(t, Config{freePort: freePort})
	if picks.Load() < 3 {
		t.Fatalf("Start picked %d ports; the first attempt should have failed", picks.Load())
	}
	roundTrip(t, s, "swept")
}

// TestStartDoesNotWaitOnAServerThatCannotListen: a port taken after MinIO
// checked it but before it listens leaves MinIO up and logging "Unable to
// listen on", never live. Start reads that from the log and tries other
// ports at once, rather than waiting out the ready timeout each time.
func TestStartDoesNotWaitOnAServerThatCannotListen(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	runs := filepath.Join(tmp, "runs")
	bin := filepath.Join(tmp, "minio")
	script := "#!/bin/sh\necho run >> " + runs + "\n" +
		"echo 'Error: Unable to listen on `127.0.0.1:1`: bind: address already in use'\nexec sleep 600\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := Start(t.Context(), Config{Bin: bin, Dir: filepath.Join(tmp, "dir")})
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("Start = %v, want errPortTaken", err)
	}
	if elapsed := time.Since(began); elapsed >= readyTimeout {
		t.Errorf("Start took %s: it waited out the ready timeout (%s)", elapsed, readyTimeout)
	}
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("run")); n != startAttempts {
		t.Errorf("the server was started %d times, want %d", n, startAttempts)
	}
}
