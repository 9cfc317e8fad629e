package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// TestInstallRefusesNonRegistrySources: a dependency from a git
// repository, a local path or a tarball URL, or a lockfile entry resolved
// outside the registry, is refused before npm runs: nothing is fetched
// (the loopback server the sources name sees no request) and the model is
// told why.
func TestInstallRefusesNonRegistrySources(t *testing.T) {
	t.Parallel()
	host, hits := countingServer(t)
	pkg := func(deps string) string {
		return `{"name": "p", "version": "1.0.0", "scripts": {"typecheck": "true"}, "devDependencies": {` + deps + `}}`
	}
	lock := func(entry string) string {
		return `{"name": "p", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": {
			"": {"name": "p", "version": "1.0.0", "devDependencies": {"outer": "1.0.0"}}, ` + entry + `}}`
	}
	for _, tc := range []struct {
		name, pkg, lock, reason string
	}{
		{"GitURL", pkg(`"outer": "git+http://` + host + `/outer.git"`), "", "a git repository"},
		{"GitHubShorthand", pkg(`"outer": "someone/outer#main"`), "", "a git repository"},
		{"AliasToGit", pkg(`"outer": "npm:outer@git+http://` + host + `/outer.git"`), "", "a git repository"},
		{"FilePath", pkg(`"outer": "file:../outer"`), "", "a local path"},
		{"Link", pkg(`"outer": "link:../outer"`), "", "a local path"},
		{"TarballURL", pkg(`"outer": "http://` + host + `/outer-1.0.0.tgz"`), "", "a tarball URL"},
		{"Override", `{"name": "p", "scripts": {"typecheck": "true"}, "devDependencies": {"outer": "1.0.0"}, "overrides": {"inner": "git+http://` + host + `/inner.git"}}`, "", "a git repository"},
		{"LockfileResolvedOnLoopback", pkg(`"outer": "1.0.0"`), lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "http://` + host + `/outer/-/outer-1.0.0.tgz"}`), "resolved outside the registry"},
		{"LockfileResolvedToGit", pkg(`"outer": "1.0.0"`), lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "git+http://` + host + `/outer.git#abc"}`), "resolved outside the registry"},
		{"LockfileRegistryLookalike", pkg(`"outer": "1.0.0"`), lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "https://registry.npmjs.org.` + host + `/outer/-/outer-1.0.0.tgz"}`), "resolved outside the registry"},
		{"LockfileLink", pkg(`"outer": "1.0.0"`), lock(`"node_modules/outer": {"resolved": "../outer", "link": true}, "../outer": {"version": "1.0.0"}`), "a local path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := runTypecheck(t, tc.pkg, tc.lock)
			if out.Stage != sandbox.StageInstall || out.Refused == "" || out.Passed() || !strings.Contains(out.Refused, tc.reason) ||
				!strings.Contains(out.Summary(), "only packages of the registry are installed") {
				t.Fatalf("outcome: stage %s, refused %q, summary %q\n%s", out.Stage, out.Refused, out.Summary(), out.Output.Full())
			}
			if n := hits.Load(); n > 0 {
				t.Fatalf("the install reached the loopback server %d times", n)
			}
		})
	}
}

// TestAFifoInTheWorkspaceDoesNotBlock: a command leaves a FIFO where npm
// looks for a lockfile; the next run neither opens it nor waits.
func TestAFifoInTheWorkspaceDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"fifo": "mkfifo npm-shrinkwrap.json && echo made"}, nil)
	f.run(t, "fifo", time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	type result struct {
		out sandbox.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f.ws.Run(ctx, "typecheck", time.Minute)
		done <- result{out, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run after a FIFO was left in the workspace has not returned after 2 minutes")
	}
	if r.err != nil || !r.out.Passed() {
		t.Fatalf("run: %v, %s\n%s", r.err, r.out.Summary(), r.out.Output.Full())
	}
}

// TestAFreshInstallReachesTheRegistryThroughItsProxy: with an empty cache,
// the fixture's dependencies come from the registry through the install
// step's proxy, the only way out of its sandbox.
func TestAFreshInstallReachesTheRegistryThroughItsProxy(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	cache := sandboxtest.Dir(t)
	// An npm cache once shared by every project is removed at start.
	if err := os.MkdirAll(filepath.Join(cache, "npm", "_cacache"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.New(t, sandbox.Config{CacheDir: cache})
	if _, err := os.Stat(filepath.Join(cache, "npm")); !os.IsNotExist(err) {
		t.Errorf("the shared npm cache is still there: %v", err)
	}
	ws := sb.Workspace(t.Name(), f.store, project)
	t.Cleanup(func() { ws.Close() })
	out, err := ws.Run(t.Context(), "typecheck", 0)
	if err != nil || !out.Passed() || out.Install.Cached || out.Install.Command != "npm ci" {
		t.Fatalf("run: %v, %s, install %+v\n%s", err, out.Summary(), out.Install, out.Output.Full())
	}
	// The project's own npm cache: another project's install gets another.
	if caches, err := os.ReadDir(filepath.Join(cache, "npm-projects")); err != nil || len(caches) != 1 {
		t.Errorf("npm caches: %v, %v; want the project's one", caches, err)
	}
	t.Logf("a fresh npm ci of typescript through the registry proxy: %s", out.Install.Duration)
}

// TestDiskLimits: a command's writes past the workspace's limit fail (the
// workspace is a tmpfs of that size), and the workspace is made anew from
// the project's files; an install past its limit fails, and its npm cache
// is not kept.
func TestDiskLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, fill string }{
		{"Workspace", "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 16M /dev/zero > fill$i; done; echo filled"},
		{"WorkspaceAtOnce", "head -c 80M /dev/zero > fill; echo filled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, map[string]string{"fill": tc.fill}, nil)
			sb := sandboxtest.New(t, sandbox.Config{MaxWorkspaceBytes: 64 << 20})
			ws := sb.Workspace(t.Name(), f.store, project)
			t.Cleanup(func() { ws.Close() })
			out, err := ws.Run(t.Context(), "fill", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if out.OverLimit != "it filled the workspace (64 MiB): writes past it failed with no space left on device" || out.Passed() ||
				!strings.Contains(out.Summary(), "npm run fill exited with code 0 after") || !strings.Contains(out.Output.Full(), "No space left on device") {
				t.Fatalf("%s\n%s", out.Summary(), out.Output.Full())
			}
			if ws.Dir() != "" {
				t.Errorf("the workspace over its limit was kept at %s", ws.Dir())
			}
			if again, err := ws.Run(t.Context(), "typecheck", 0); err != nil || !again.Passed() || again.Sync.Written != len(sandboxtest.Fixture()) {
				t.Fatalf("the run after: %v, %s, %+v", err, again.Summary(), again.Sync)
			}
		})
	}
	t.Run("Install", func(t *testing.T) {
		t.Parallel()
		f := setup(t, nil, nil)
		cache := sandboxtest.Dir(t)
		sb := sandboxtest.New(t, sandbox.Config{CacheDir: cache, MaxInstallBytes: 4 << 20})
		ws := sb.Workspace(t.Name(), f.store, project)
		t.Cleanup(func() { ws.Close() })
		out, err := ws.Run(t.Context(), "typecheck", 0)
		if err != nil {
			t.Fatal(err)
		}
		if out.Stage != sandbox.StageInstall || out.OverLimit != "it wrote more than 4 MiB in the install" || out.Passed() {
			t.Fatalf("%s, over limit %q\n%s", out.Summary(), out.OverLimit, out.Output.Full())
		}
		caches, _ := os.ReadDir(filepath.Join(cache, "npm-projects"))
		deps, _ := os.ReadDir(filepath.Join(cache, "deps"))
		if len(caches) != 0 || len(deps) != 0 {
			t.Errorf("left after the install over its limit: npm caches %v, installs %v", caches, deps)
		}
	})
}
