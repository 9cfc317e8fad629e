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
	"maps"
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
	sb        *Sandbox
	dir       string // <CacheDir>/deps
	npmCaches string // <CacheDir>/npm-projects: npm's download cache, one per project

	mu    sync.Mutex
	locks map[string]chan struct{} // key → held while installing it
	inUse map[string]int           // key → workspaces running with it
}

// lockfiles npm ci installs from, in npm's order of preference.
var lockfiles = []string{"npm-shrinkwrap.json", "package-lock.json"}

// installEnv are the variables of this process an install may see: how to
// trust the registry, never credentials.
var installEnv = []string{"NODE_EXTRA_CA_CERTS"}

// Install says how a command's dependencies were provided.
type Install struct {
	Command  string // npm ci or npm install; "" when the project has no dependencies
	Cached   bool
	Duration time.Duration // of an install made for this command
}

// ensure returns the node_modules directory for a project's package.json
// and lockfile, installing it first unless cached, and a release func to
// call when the command using it has ended. A failed install is returned
// as failed (its exit code and output), not cached; a dependency from
// outside the registry is a *SourceError, a package.json or lockfile npm
// could read otherwise than the check a *ManifestError, and nothing is
// installed.
func (i *installs) ensure(ctx context.Context, projectID string, pkg []byte, lockName string, lock []byte) (modules string, inst Install, failed *execResult, release func(), err error) {
	release = func() {}
	inst.Command = "npm install"
	if lockName != "" {
		inst.Command = "npm ci"
	}
	// Checked first: whether there is anything to install is read from
	// the files the check has read as npm reads them.
	if err := checkSources(pkg, lockName, lock, i.sb.cfg.Registry); err != nil {
		return "", inst, nil, release, err
	}
	if !hasDependencies(pkg) {
		return "", Install{}, nil, release, nil
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
	res, err := i.install(ctx, projectID, key, dir, pkg, lockName, lock, inst.Command)
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
func (i *installs) install(ctx context.Context, projectID, key, dir string, pkg []byte, lockName string, lock []byte, command string) (*execResult, error) {
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
	npmCache, err := i.npmCache(projectID)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for k, v := range pinnedNpm(i.sb.cfg.Registry) {
		env["npm_config_"+strings.ReplaceAll(k, "-", "_")] = v
	}
	for _, k := range installEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	sockDir, err := proxyDir(i.sb.runDir)
	if err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "registry.sock")
	proxy, err := startRegistryProxy(sock, i.sb.cfg.Registry, i.sb.cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	defer proxy.Close()
	argv := append([]string{"node", "-e", registryForwarder, "--"}, strings.Fields(command)...)
	for _, k := range slices.Sorted(maps.Keys(pinnedNpm(i.sb.cfg.Registry))) {
		argv = append(argv, "--"+k+"="+pinnedNpm(i.sb.cfg.Registry)[k])
	}
	q := &quota{what: "the install", dirs: []string{tmp, npmCache}, maxBytes: i.sb.cfg.MaxInstallBytes}
	res, err := i.sb.exec(ctx, spec{workspace: tmp, npmCache: npmCache, registry: sock, env: env, argv: argv, timeout: i.sb.cfg.InstallTimeout, quota: q})
	proxy.Close()
	if err != nil {
		return nil, fmt.Errorf("install dependencies: %w", err)
	}
	if res.overQuota != "" {
		// The cache holds part of what went over.
		if err := os.RemoveAll(npmCache); err != nil {
			return nil, fmt.Errorf("install dependencies: remove the npm cache over its limit: %w", err)
		}
		return &res, nil
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

// pinnedNpm are the npm settings of an install, given on its command line
// and in its environment, which npm reads before any .npmrc: a package
// cannot name a program for npm to run (git, a script shell) or another
// registry. Git names a program that does not exist, so a git dependency
// fails before anything is cloned.
func pinnedNpm(registry string) map[string]string {
	return map[string]string{
		"registry": registry, "replace-registry-host": "npmjs",
		"cache": "/cache", "userconfig": "/dev/null/user-npmrc", "globalconfig": "/dev/null/global-npmrc",
		"git": "/dev/null/git", "ignore-scripts": "true", "script-shell": "/dev/null/sh",
		"install-links": "false", "audit": "false", "fund": "false", "update-notifier": "false",
		"strict-ssl": "true", "loglevel": "error",
	}
}

// npmCache returns npm's download cache of a project: what one project's
// install fetched is never read by another's.
func (i *installs) npmCache(projectID string) (string, error) {
	sum := sha256.Sum256([]byte(projectID))
	dir := filepath.Join(i.npmCaches, hex.EncodeToString(sum[:12]))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("install dependencies: npm cache: %w", err)
	}
	if err := i.sb.own(dir); err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // recently used: evicted last
	return dir, nil
}

// installVersion names how installs are made: installs made before
// dependencies were refused from outside the registry are not reused.
const installVersion = "registry-only-1"

// installKey names an install: how installs are made, node's version,
// package.json without its scripts (installs run none, and a changed
// script needs no new install) and the lockfile.
func installKey(node string, pkg []byte, lockName string, lock []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(pkg, &fields) == nil {
		delete(fields, "scripts")
		pkg, _ = json.Marshal(fields) // keys sorted: the same fields, the same key
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(installVersion), []byte(node), pkg, []byte(lockName), lock} {
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
	i.evictNpmCaches()
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

// evictNpmCaches removes the least recently used projects' npm caches
// beyond MaxInstalls. One in use by a running install is recently used (an
// install marks it when it starts), so it is among the kept.
func (i *installs) evictNpmCaches() {
	entries, err := os.ReadDir(i.npmCaches)
	if err != nil {
		return
	}
	type cache struct {
		name string
		used time.Time
	}
	var all []cache
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && e.IsDir() {
			all = append(all, cache{e.Name(), fi.ModTime()})
		}
	}
	if len(all) <= i.sb.cfg.MaxInstalls {
		return
	}
	slices.SortFunc(all, func(a, b cache) int { return a.used.Compare(b.used) })
	for _, c := range all[:len(all)-i.sb.cfg.MaxInstalls] {
		if err := os.RemoveAll(filepath.Join(i.npmCaches, c.name)); err != nil {
			i.sb.cfg.Logger.Warn("evict a project's npm cache", slog.String("dir", c.name), slog.String("err", err.Error()))
		}
	}
}
