package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// installs is the dependency cache: one directory per hash of node's
// version, package.json and the lockfile, holding the node_modules npm
// installed for them.
type installs struct {
	sb       *Sandbox
	dir      string // <CacheDir>/deps
	npmCache string // npm's download cache, shared by installs

	mu    sync.Mutex
	locks map[string]chan struct{} // key → held while installing it
	inUse map[string]int           // key → workspaces running with it
}

// lockfiles npm ci installs from, in npm's order of preference.
var lockfiles = []string{"npm-shrinkwrap.json", "package-lock.json"}

// installEnv are the variables of this process an install may see: how to
// reach the registry, never credentials.
var installEnv = []string{"NODE_EXTRA_CA_CERTS", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "npm_config_registry"}

// Install says how a command's dependencies were provided.
type Install struct {
	Command  string // npm ci or npm install; "" when the project has no dependencies
	Cached   bool
	Duration time.Duration // of an install made for this command
}

// ensure returns the node_modules directory for the workspace's
// package.json and lockfile, installing it first unless cached, and a
// release func to call when the command using it has ended. A failed
// install is returned as failed (its exit code and output), not cached.
func (i *installs) ensure(ctx context.Context, root *os.Root) (modules string, inst Install, failed *execResult, release func(), err error) {
	release = func() {}
	pkg, err := root.ReadFile("package.json")
	if err != nil {
		return "", inst, nil, release, fmt.Errorf("read package.json: %w", err)
	}
	if !hasDependencies(pkg) {
		return "", inst, nil, release, nil
	}
	lockName, lock := "", []byte(nil)
	for _, name := range lockfiles {
		if b, err := root.ReadFile(name); err == nil {
			lockName, lock = name, b
			break
		}
	}
	inst.Command = "npm install"
	if lockName != "" {
		inst.Command = "npm ci"
	}
	key := installKey(i.sb.node, pkg, lockName, lock)
	dir := filepath.Join(i.dir, key)

	unlock, err := i.lock(ctx, key)
	if err != nil {
		return "", inst, nil, release, err
	}
	defer unlock()
	if fi, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil && fi.IsDir() {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // recently used: evicted last
		inst.Cached = true
		return filepath.Join(dir, "node_modules"), inst, nil, i.use(key), nil
	}
	start := time.Now()
	res, err := i.install(ctx, key, dir, pkg, lockName, lock, inst.Command)
	inst.Duration = time.Since(start)
	if err != nil || res != nil {
		return "", inst, res, release, err
	}
	release = i.use(key)
	i.evict()
	return filepath.Join(dir, "node_modules"), inst, nil, release, nil
}

// install runs npm in a sandbox with network over a fresh directory, and
// moves the result into the cache when it succeeds. Packages' install
// scripts do not run: they would run code from the network with network.
func (i *installs) install(ctx context.Context, key, dir string, pkg []byte, lockName string, lock []byte, command string) (*execResult, error) {
	tmp, err := os.MkdirTemp(i.dir, ".tmp-"+key+"-")
	if err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename, nothing is left there
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	files := map[string][]byte{"package.json": pkg}
	if lockName != "" {
		files[lockName] = lock
	}
	for name, content := range files {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return nil, fmt.Errorf("install dependencies: %w", err)
		}
		if err := i.sb.own(p); err != nil {
			return nil, err
		}
	}
	if err := i.sb.own(tmp); err != nil {
		return nil, err
	}
	env := map[string]string{"npm_config_cache": "/cache"}
	for _, k := range installEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	argv := append(strings.Fields(command), "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	res, err := i.sb.exec(ctx, spec{workspace: tmp, npmCache: i.npmCache, network: true, env: env, argv: argv, timeout: i.sb.cfg.InstallTimeout})
	if err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	if res.exitCode != 0 || res.timedOut {
		return &res, nil
	}
	// A package.json whose dependencies are all empty gets no node_modules.
	if err := os.Mkdir(filepath.Join(tmp, "node_modules"), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another process installed the same key meanwhile: use theirs.
		if _, serr := os.Stat(filepath.Join(dir, "node_modules")); serr != nil {
			return nil, fmt.Errorf("install dependencies: %w", err)
		}
	}
	return nil, nil
}

// installKey names an install: node's version, package.json without its
// scripts (installs run none, and a changed script needs no new install)
// and the lockfile.
func installKey(node string, pkg []byte, lockName string, lock []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(pkg, &fields) == nil {
		delete(fields, "scripts")
		pkg, _ = json.Marshal(fields) // keys sorted: the same fields, the same key
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(node), pkg, []byte(lockName), lock} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

func hasDependencies(pkg []byte) bool {
	var p map[string]json.RawMessage
	if json.Unmarshal(pkg, &p) != nil {
		return true // let npm say what is wrong with it
	}
	for _, k := range []string{"dependencies", "devDependencies", "optionalDependencies"} {
		var deps map[string]any
		if json.Unmarshal(p[k], &deps) == nil && len(deps) > 0 {
			return true
		}
	}
	return false
}

// lock holds the key while one caller checks or installs it.
func (i *installs) lock(ctx context.Context, key string) (func(), error) {
	for {
		i.mu.Lock()
		held, busy := i.locks[key]
		if !busy {
			ch := make(chan struct{})
			i.locks[key] = ch
			i.mu.Unlock()
			return func() {
				i.mu.Lock()
				delete(i.locks, key)
				i.mu.Unlock()
				close(ch)
			}, nil
		}
		i.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the dependency install: %w", context.Cause(ctx))
		}
	}
}

// use marks an install as mounted until the returned func is called: it is
// not evicted meanwhile.
func (i *installs) use(key string) func() {
	i.mu.Lock()
	if i.inUse == nil {
		i.inUse = map[string]int{}
	}
	i.inUse[key]++
	i.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			i.mu.Lock()
			if i.inUse[key]--; i.inUse[key] <= 0 {
				delete(i.inUse, key)
			}
			i.mu.Unlock()
		})
	}
}

// evict removes the least recently used installs beyond MaxInstalls,
// except those in use.
func (i *installs) evict() {
	entries, err := os.ReadDir(i.dir)
	if err != nil {
		return
	}
	type install struct {
		key  string
		used time.Time
	}
	var all []install
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			// Left by an install whose process died.
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 2*i.sb.cfg.InstallTimeout {
				_ = os.RemoveAll(filepath.Join(i.dir, e.Name()))
			}
			continue
		}
		if fi, err := e.Info(); err == nil {
			all = append(all, install{e.Name(), fi.ModTime()})
		}
	}
	if len(all) <= i.sb.cfg.MaxInstalls {
		return
	}
	slices.SortFunc(all, func(a, b install) int { return a.used.Compare(b.used) })
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, in := range all[:len(all)-i.sb.cfg.MaxInstalls] {
		if i.inUse[in.key] > 0 || i.locks[in.key] != nil {
			continue
		}
		if err := os.RemoveAll(filepath.Join(i.dir, in.key)); err != nil {
			i.sb.cfg.Logger.Warn("evict cached dependencies", slog.String("key", in.key), slog.String("err", err.Error()))
		}
	}
}
