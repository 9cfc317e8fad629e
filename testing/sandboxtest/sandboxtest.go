// Package sandboxtest gives tests a real sandbox (bubblewrap, node, npm,
// prlimit) and a small TypeScript project to run in it: typescript as its
// one devDependency, pinned by a lockfile.
//
// Without bubblewrap, node or npm the test is skipped, naming ./scripts/test
// as the way to install them, unless CI=true, where it fails: CI must not
// skip silently. The fixture's dependencies come from the npm registry once
// and are kept in a cache directory under os.TempDir shared by test runs.
package sandboxtest

import (
	"embed"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/testing/prereq"
)

//go:embed fixture
var fixture embed.FS

// CacheDir is where the tests' dependency installs are kept between runs.
func CacheDir() string { return filepath.Join(os.TempDir(), "agentworker-sandboxtest-cache") }

// New returns a sandbox for one test, with its own workspace directory and
// the shared dependency cache; cfg's zero fields get sandbox's defaults,
// but longer timeouts (a busy test machine is slow). Commands run where
// the host gives no cgroup to cap a sandbox as a whole (AllowUncapped):
// the tests of the cap itself make their sandbox with sandbox.New.
func New(t testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	cfg.AllowUncapped = true
	if cfg.Dir == "" {
		cfg.Dir = Dir(t)
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = CacheDir()
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 5 * time.Minute
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = 2 * time.Minute
	}
	sb, err := sandbox.New(t.Context(), cfg)
	if errors.Is(err, sandbox.ErrUnavailable) {
		prereq.Missing(t, "the sandbox (bubblewrap, Node.js, npm)", err)
	}
	if err != nil {
		t.Fatalf("sandboxtest: %v", err)
	}
	return sb
}

// RequireCapped ends the test unless a cgroup caps each of sb's sandboxes
// as a whole: it skips, or fails when CI=true (prereq.MissingFromMachine).
func RequireCapped(t testing.TB, sb *sandbox.Sandbox) {
	t.Helper()
	if !sb.Capped() {
		prereq.MissingFromMachine(t, "a cgroup the test process may divide (memory and pids controllers)",
			"run the tests as root, or in a delegated cgroup v2", errors.New(sb.Limits()))
	}
}

// Dir returns a directory removed when the test ends that the sandbox's
// user can reach (t.TempDir's are private to root).
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentworker-sandboxtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Fixture returns the TypeScript project's files by path: package.json
// (scripts typecheck and build), package-lock.json, tsconfig.json,
// src/greet.ts and src/index.ts. It type-checks.
func Fixture() map[string]string {
	files := map[string]string{}
	err := fs.WalkDir(fixture, "fixture", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fixture.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("fixture", p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		panic("sandboxtest: read the embedded fixture: " + err.Error())
	}
	return files
}

// WorkerUID is the user a non-root worker runs as in these tests: the
// runtime image's.
const WorkerUID = 10001

// nonRootEnv marks the test process Workers started as the non-root worker.
const nonRootEnv = "AGENTWORKER_SANDBOXTEST_NONROOT"

// Worker is one way the worker runs: as root (the sandbox then runs as
// nobody) or as a user without privileges (the sandbox runs as that user).
type Worker struct {
	Name string // "Root" or "NonRoot"
	root bool
}

// Workers are the ways this test process can run the worker: as root both,
// the non-root one in a child process of WorkerUID; otherwise the non-root
// one, in this process.
func Workers() []Worker {
	if os.Geteuid() == 0 && os.Getenv(nonRootEnv) == "" {
		return []Worker{{Name: "Root", root: true}, {Name: "NonRoot"}}
	}
	return []Worker{{Name: "NonRoot"}}
}

// Run runs body as w: in this process when it already is w; else (root
// running the non-root worker) it runs the current test again, this
// subtest only, in a child test process of WorkerUID, and reports how that
// went.
func (w Worker) Run(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if w.root || os.Geteuid() != 0 {
		body(t)
		return
	}
	// The test binary, copied where WorkerUID can run it (go test builds
	// it in a directory private to root).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(Dir(t), filepath.Base(exe))
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.CommandContext(t.Context(), bin, "-test.run", strings.Join(pattern, "/"), "-test.count", "1", "-test.v")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), nonRootEnv+"=1", "HOME=/nonexistent")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: WorkerUID, Gid: WorkerUID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %d: %v\n%s", WorkerUID, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as uid %d, %s did not run:\n%s", WorkerUID, t.Name(), out)
	}
	t.Logf("as uid %d:\n%s", WorkerUID, out)
}
