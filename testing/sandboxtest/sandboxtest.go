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
	"path/filepath"
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
// but longer timeouts (a busy test machine is slow).
func New(t testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
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
