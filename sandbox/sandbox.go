// Package sandbox runs a project's own npm scripts (typecheck, lint, test,
// build) the way a developer would, but never outside a bubblewrap sandbox:
// a read-only system, the project's workspace (a tmpfs of a fixed size) the
// only writable place besides a small tmpfs /tmp, no network, a cleared
// environment, rlimits on CPU, memory, processes and file size per
// process, a cgroup capping memory and processes of the sandbox as a
// whole, and the whole process tree killed on timeout.
//
// A [Workspace] is the project as one task sees it, materialised in a
// directory of its own and synced incrementally before each command. Its
// dependencies are installed by npm ci (npm install without a lockfile) in
// a separate sandboxed step that reaches the registry, through a proxy,
// and nothing else, and runs no code of the project or its dependencies:
// dependencies from outside the registry are refused. Installs are cached
// by the hash of package.json and the lockfile and mounted read-only as
// node_modules. Every sandboxed process runs under a seccomp filter.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Config tunes a Sandbox.
type Config struct {
	// Dir holds the workspaces, one directory per process and task. The
	// sandbox's user must be able to reach it. Defaults to
	// agentworker-sandbox under os.TempDir().
	Dir string
	// CacheDir holds installed dependencies by lockfile hash and npm's
	// download caches, one per project. Defaults to Dir/cache.
	CacheDir string
	// Registry is the npm registry installs fetch from, the one host the
	// install step reaches. Defaults to npm_config_registry of the
	// environment, else https://registry.npmjs.org/.
	Registry string
	// Concurrency caps the sandboxed processes (installs and commands)
	// this process runs at once. Defaults to 2.
	Concurrency int
	// DefaultTimeout is a command's timeout when the call names none.
	// Defaults to 30 seconds.
	DefaultTimeout time.Duration
	// MaxTimeout caps a command's timeout. Defaults to 2 minutes.
	MaxTimeout time.Duration
	// InstallTimeout bounds a dependency install. Defaults to 5 minutes.
	InstallTimeout time.Duration
	// MaxOutputBytes bounds the output kept of one command: beyond it the
	// middle is cut, the head and tail kept. Defaults to 1 MiB.
	MaxOutputBytes int
	// MaxFileBytes: project files larger than this are not put in the
	// workspace. Defaults to 32 MiB.
	MaxFileBytes int64
	// MaxWorkspaceBytes caps a workspace: the project's files and what
	// commands write beside them. A command works in a tmpfs of this size,
	// so its writes past it fail; the workspace is then made anew.
	// Defaults to 512 MiB.
	MaxWorkspaceBytes int64
	// MaxInstallBytes caps what an install writes on disk: the installed
	// dependencies and the project's npm cache. Defaults to 2 GiB.
	MaxInstallBytes int64
	// MaxInstalls is how many dependency installs the cache keeps; the least
	// recently used go first. Defaults to 16.
	MaxInstalls int
	// Limits are the rlimits of every sandboxed process and the caps of
	// each sandbox as a whole.
	Limits Limits
	// AllowUncapped lets commands run where no cgroup can cap a sandbox's
	// memory and processes as a whole; only the rlimits, per process, hold
	// then, and memory shared between processes escapes them. Defaults to
	// false: New fails with an error wrapping ErrUncapped.
	AllowUncapped bool
	// UID and GID are the user a process running as root runs the sandbox
	// as (rlimits on processes do not bind root). Default to 65534 (nobody).
	UID, GID int
	// Bwrap is the bubblewrap binary. Defaults to bwrap on PATH.
	Bwrap string
	// Logger defaults to discarding.
	Logger *slog.Logger

	// mountinfo and selfCgroup are where this process's mounts and
	// cgroups are read. Default to /proc/self/mountinfo and
	// /proc/self/cgroup.
	mountinfo, selfCgroup string
}

// Limits are rlimits, applied with prlimit(1) inside the sandbox to the
// command and everything it starts.
type Limits struct {
	// CPUSeconds of CPU time per process. Defaults to 120.
	CPUSeconds int
	// MemoryBytes caps each process's data segment (RLIMIT_DATA: heap and
	// private mappings; V8's address space reservations do not count).
	// Defaults to 2 GiB.
	MemoryBytes int64
	// Processes caps the processes and threads of the sandbox's user in its
	// namespace. Defaults to 256.
	Processes int
	// FileBytes caps the size of a file a process writes. Defaults to 256 MiB.
	FileBytes int64
	// TmpBytes is the size of the tmpfs at /tmp. Defaults to 256 MiB.
	TmpBytes int64
	// ShmBytes is the size of the tmpfs at /dev/shm; the rest of /dev is
	// read-only. Defaults to 16 MiB.
	ShmBytes int64
	// SandboxMemoryBytes caps the memory of a sandbox as a whole (its
	// cgroup's): every process's, shared memory included, and what its
	// tmpfs hold (the workspace, /tmp, /dev/shm); no swap. Processes caps
	// its processes and threads as a whole too. Defaults to 3 GiB.
	SandboxMemoryBytes int64
}

func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = filepath.Join(os.TempDir(), "agentworker-sandbox")
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(c.Dir, "cache")
	}
	if c.Registry == "" {
		c.Registry = os.Getenv("npm_config_registry")
	}
	if c.Registry == "" {
		c.Registry = defaultRegistry
	}
	c.Registry = strings.TrimSuffix(c.Registry, "/") + "/"
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 30 * time.Second
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 2 * time.Minute
	}
	c.DefaultTimeout = min(c.DefaultTimeout, c.MaxTimeout)
	if c.InstallTimeout <= 0 {
		c.InstallTimeout = 5 * time.Minute
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 1 << 20
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 32 << 20
	}
	if c.MaxWorkspaceBytes <= 0 {
		c.MaxWorkspaceBytes = 512 << 20
	}
	if c.MaxInstallBytes <= 0 {
		c.MaxInstallBytes = 2 << 30
	}
	if c.MaxInstalls <= 0 {
		c.MaxInstalls = 16
	}
	l := &c.Limits
	if l.CPUSeconds <= 0 {
		l.CPUSeconds = 120
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 2 << 30
	}
	if l.Processes <= 0 {
		l.Processes = 256
	}
	if l.FileBytes <= 0 {
		l.FileBytes = 256 << 20
	}
	if l.TmpBytes <= 0 {
		l.TmpBytes = 256 << 20
	}
	if l.ShmBytes <= 0 {
		l.ShmBytes = 16 << 20
	}
	if l.SandboxMemoryBytes <= 0 {
		l.SandboxMemoryBytes = 3 << 30
	}
	if c.mountinfo == "" {
		c.mountinfo = "/proc/self/mountinfo"
	}
	if c.selfCgroup == "" {
		c.selfCgroup = "/proc/self/cgroup"
	}
	if c.UID <= 0 {
		c.UID = 65534
	}
	if c.GID <= 0 {
		c.GID = 65534
	}
	if c.Bwrap == "" {
		c.Bwrap = "bwrap"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrUnavailable reports that the sandbox cannot start on this host; the
// error says why.
var ErrUnavailable = errors.New("sandbox unavailable")

// Sandbox starts sandboxed processes for the workspaces of this process.
type Sandbox struct {
	cfg     Config
	bwrap   string
	prlimit string
	node    string // node's version: part of the dependency cache key
	runDir  string // this process's workspaces
	slots   chan struct{}
	deps    *installs
	asUser  bool   // running as root: the sandbox runs as cfg.UID
	seccomp []byte // the filter every sandboxed process runs under
	cgroups *cgroups
	// uncapped says why no cgroup caps a sandbox (AllowUncapped).
	uncapped string
}

// New checks that the sandbox can start here — bubblewrap with a user
// namespace, prlimit, node and npm under /usr, a cgroup to cap each
// sandbox's memory and processes as a whole (unless AllowUncapped) — by
// running one sandboxed process, and removes the workspaces of processes
// that are gone. An error wrapping ErrUnavailable says what is missing.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	cfg = cfg.withDefaults()
	if err := closeInheritedOnExec(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s := &Sandbox{cfg: cfg, slots: make(chan struct{}, cfg.Concurrency), asUser: os.Geteuid() == 0}
	var err error
	if s.bwrap, err = exec.LookPath(cfg.Bwrap); err != nil {
		return nil, fmt.Errorf("%w: bubblewrap (%s) not found: install the %s package: %w", ErrUnavailable, cfg.Bwrap, Packages()["bwrap"], err)
	}
	if s.prlimit, err = underUsr("prlimit"); err != nil {
		return nil, err
	}
	if _, err := underUsr("npm"); err != nil {
		return nil, err
	}
	nodePath, err := underUsr("node")
	if err != nil {
		return nil, err
	}
	version, err := exec.CommandContext(ctx, nodePath, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s --version: %w", ErrUnavailable, nodePath, err)
	}
	s.node = strings.TrimSpace(string(version))
	if s.seccomp, err = seccompFilter(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if s.cgroups, err = findCgroups(cfg.mountinfo, cfg.selfCgroup); err != nil {
		if !cfg.AllowUncapped {
			return nil, fmt.Errorf("%w: %w: give this process a cgroup it may divide, with the memory and pids controllers (cgroup v2, delegated), or allow commands without that cap", ErrUnavailable, err)
		}
		s.uncapped = err.Error()
		cfg.Logger.Warn("sandboxes are not capped as a whole: only the per-process limits hold", slog.String("reason", s.uncapped))
	} else {
		cfg.Logger.Info("each sandbox gets a cgroup capping its memory and processes", slog.String("cgroups", s.cgroups.String()))
	}
	if err := s.prepareDirs(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.deps = &installs{sb: s, dir: filepath.Join(cfg.CacheDir, "deps"), npmCaches: filepath.Join(cfg.CacheDir, "npm-projects"), locks: map[string]chan struct{}{}}
	if err := s.probe(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return s, nil
}

// closeInheritedOnExec marks every descriptor from 3 up close-on-exec. A
// descriptor this process inherited without the flag (a shell's open
// directory or file) would otherwise reach every process it starts, the
// sandbox's included; the descriptors a sandbox needs are passed to it
// explicitly.
func closeInheritedOnExec() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	// Linux before 5.11: one descriptor at a time.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// Packages are the programs the sandbox needs and the Debian packages that
// install them, for the messages that say what is missing and for images
// that ship the sandbox.
func Packages() map[string]string {
	return map[string]string{"bwrap": "bubblewrap", "node": "nodejs", "npm": "npm", "prlimit": "util-linux"}
}

// underUsr finds a program the sandbox needs; the sandbox sees only /usr of
// the host's file system, so the program must live there.
func underUsr(name string) (string, error) {
	pkg := Packages()[name]
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found: install the %s package", ErrUnavailable, name, pkg)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: resolve %s: %w", ErrUnavailable, p, err)
	}
	abs, _ := filepath.Abs(p)
	for _, q := range []string{abs, real} {
		if !strings.HasPrefix(q, "/usr/") {
			return "", fmt.Errorf("%w: %s is at %s, outside /usr, which is all of the host the sandbox sees: install the %s package", ErrUnavailable, name, q, pkg)
		}
	}
	return abs, nil
}

// prepareDirs creates the directories, owned by the sandbox's user where
// it writes, and removes workspaces left by processes that are gone.
func (s *Sandbox) prepareDirs() error {
	for _, d := range []string{s.cfg.Dir, s.cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create sandbox directory: %w", err)
		}
	}
	// npm's download cache was once shared by every project: one project
	// could leave there what another installed.
	if err := os.RemoveAll(filepath.Join(s.cfg.CacheDir, "npm")); err != nil {
		return fmt.Errorf("remove the shared npm cache: %w", err)
	}
	for _, d := range []string{filepath.Join(s.cfg.CacheDir, "deps"), filepath.Join(s.cfg.CacheDir, "npm-projects")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create sandbox directory: %w", err)
		}
		if err := s.own(d); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("read sandbox directory: %w", err)
	}
	for _, e := range entries {
		if stale(e) {
			if err := removeAll(filepath.Join(s.cfg.Dir, e.Name())); err != nil {
				s.cfg.Logger.Warn("remove stale sandbox workspaces", slog.String("dir", e.Name()), slog.String("err", err.Error()))
			}
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	s.runDir = filepath.Join(s.cfg.Dir, fmt.Sprintf("run-%d-%x", os.Getpid(), suffix))
	if err := os.MkdirAll(s.runDir, 0o755); err != nil {
		return fmt.Errorf("create sandbox directory: %w", err)
	}
	return nil
}

// processStart is when this process started, near enough: a workspace
// directory of our own pid older than it is from an earlier process (a
// restarted container reuses pids).
var processStart = time.Now()

// stale reports whether a directory of Dir holds the workspaces of a
// process that is gone.
func stale(e fs.DirEntry) bool {
	rest, ok := strings.CutPrefix(e.Name(), "run-")
	if !ok {
		return false
	}
	pid, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(pid)
	switch {
	case err != nil:
		return true
	case n == os.Getpid():
		fi, err := e.Info()
		return err == nil && fi.ModTime().Before(processStart)
	}
	return syscall.Kill(n, 0) == syscall.ESRCH
}

// own gives a path to the sandbox's user, so sandboxed processes can write it.
func (s *Sandbox) own(p string) error {
	if !s.asUser {
		return nil
	}
	if err := os.Lchown(p, s.cfg.UID, s.cfg.GID); err != nil {
		return fmt.Errorf("give %s to the sandbox user: %w", p, err)
	}
	return nil
}

// probe runs one sandboxed process the way commands run: in a copy of a
// workspace, taken back when it ends.
func (s *Sandbox) probe(ctx context.Context) error {
	dir, err := os.MkdirTemp(s.runDir, "probe-")
	if err != nil {
		return fmt.Errorf("create probe workspace: %w", err)
	}
	defer removeAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("probe workspace: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in"), []byte("in\n"), 0o644); err != nil {
		return fmt.Errorf("probe workspace: %w", err)
	}
	out := &copyOut{dir: dir + ".next", maxBytes: 1 << 20, maxEntries: 10}
	defer removeAll(out.dir)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.exec(ctx, spec{workspace: dir, workBytes: 1 << 20, collect: out.collect, argv: []string{"sh", "-c", "cat in > probe"}, timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return fmt.Errorf("a sandboxed process exited with %d: %s", res.exitCode, strings.TrimSpace(res.output.Full()))
	}
	if res.collected != nil {
		return fmt.Errorf("the workspace of a sandboxed process could not be taken back: %w", res.collected)
	}
	if b, err := os.ReadFile(filepath.Join(out.dir, "probe")); err != nil || string(b) != "in\n" {
		return fmt.Errorf("a sandboxed process could not write its workspace (%q, %v)", b, err)
	}
	return nil
}

// Capped reports whether a cgroup caps each sandbox's memory as a whole.
func (s *Sandbox) Capped() bool { return s.cgroups != nil }

// Limits says which limits hold for each sandbox: for the sandbox as a
// whole (its cgroup), per process (rlimits), and the sizes of the file
// systems it writes.
func (s *Sandbox) Limits() string {
	l := s.cfg.Limits
	var whole string
	switch {
	case s.cgroups == nil:
		whole = "no memory or process cap for the sandbox as a whole (allowed uncapped: " + s.uncapped + ")"
	case s.cgroups.pidsCapped():
		whole = fmt.Sprintf("memory %d MiB (no swap) and %d processes for the sandbox as a whole (cgroup v%d)", l.SandboxMemoryBytes>>20, l.Processes, s.cgroups.version)
	default:
		whole = fmt.Sprintf("memory %d MiB (no swap) for the sandbox as a whole (cgroup v%d), no process cap for it", l.SandboxMemoryBytes>>20, s.cgroups.version)
	}
	return fmt.Sprintf("%s; per process: data %d MiB, CPU %d s, file size %d MiB, %d processes of its user; tmpfs: workspace %d MiB, /tmp %d MiB, /dev/shm %d MiB",
		whole, l.MemoryBytes>>20, l.CPUSeconds, l.FileBytes>>20, l.Processes, s.cfg.MaxWorkspaceBytes>>20, l.TmpBytes>>20, l.ShmBytes>>20)
}

// Timeout returns the timeout of a call that asks for d: the default when
// d is not positive, at most MaxTimeout.
func (s *Sandbox) Timeout(d time.Duration) time.Duration {
	if d <= 0 {
		return s.cfg.DefaultTimeout
	}
	return min(d, s.cfg.MaxTimeout)
}

// MaxTimeout is the longest a command may run.
func (s *Sandbox) MaxTimeout() time.Duration { return s.cfg.MaxTimeout }

// acquire takes one of the Concurrency slots.
func (s *Sandbox) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a sandbox slot: %w", context.Cause(ctx))
	}
}

// spec is one sandboxed process.
type spec struct {
	// workspace is bound read-write at /work; with workBytes, read-only
	// at workspaceSource, and /work is a tmpfs of workBytes holding a copy
	// of it, which the supervisor streams to collect when argv ends.
	workspace   string
	workBytes   int64
	collect     func(io.Reader) error
	nodeModules string            // bound read-only at /work/node_modules, if set
	npmCache    string            // bound read-write at /cache, if set
	registry    string            // the registry proxy's socket, bound at registrySocket (installs only)
	env         map[string]string // besides the base environment
	argv        []string
	timeout     time.Duration
	quota       *quota // the disk its writable directories may use, if set
}

// execResult is how a sandboxed process ended.
type execResult struct {
	exitCode  int // -1 when killed on timeout or over its quota
	timedOut  bool
	overQuota string // how it exceeded its quota, when it did
	collected error  // what went wrong taking the workspace out, if anything
	// overMemory says how the sandbox reached its memory or process cap,
	// when it did.
	overMemory string
	duration   time.Duration
	output     Output
}

// etcFiles are the files of /etc a process may see; /etc as a whole holds
// the host's secrets. The certificates are added for installs, which reach
// the registry over TLS.
var (
	etcFiles    = []string{"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"}
	etcNetwork  = []string{"/etc/ssl", "/etc/ca-certificates", "/etc/pki"}
	rootAliases = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32"}
)

// args builds bwrap's command line for sp; resultFD is the descriptor
// of collect's stream, when sp has one, blockFD the one bwrap waits on
// before it runs anything in the sandbox, when there is one.
func (s *Sandbox) args(sp spec, resultFD, blockFD int) []string {
	a := []string{
		"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--hostname", "sandbox", "--info-fd", "3", "--seccomp", "4",
		"--ro-bind", "/usr", "/usr",
	}
	if blockFD >= 0 {
		a = append(a, "--block-fd", strconv.Itoa(blockFD))
	}
	etc := etcFiles
	if sp.registry != "" {
		etc = append(append([]string{}, etcFiles...), etcNetwork...)
	}
	for _, f := range etc {
		if _, err := os.Stat(f); err == nil {
			a = append(a, "--ro-bind", f, f)
		}
	}
	for _, d := range rootAliases {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	// /dev holds the device nodes only, read-only; its shared memory is a
	// small tmpfs of its own.
	a = append(a, "--size", strconv.FormatInt(s.cfg.Limits.TmpBytes, 10), "--tmpfs", "/tmp",
		"--proc", "/proc", "--dev", "/dev", "--size", strconv.FormatInt(s.cfg.Limits.ShmBytes, 10), "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev")
	a = append(a, hostMasks()...)
	if sp.workBytes > 0 {
		a = append(a, "--size", strconv.FormatInt(sp.workBytes, 10), "--tmpfs", "/work", "--ro-bind", sp.workspace, workspaceSource)
	} else {
		a = append(a, "--bind", sp.workspace, "/work")
	}
	if sp.nodeModules != "" {
		a = append(a, "--ro-bind", sp.nodeModules, "/work/node_modules")
	}
	if sp.npmCache != "" {
		a = append(a, "--bind", sp.npmCache, "/cache")
	}
	// Every process has a network namespace of its own with only loopback;
	// an install reaches the registry through its proxy's socket.
	if sp.registry != "" {
		a = append(a, "--bind", sp.registry, registrySocket)
	}
	// The root bwrap builds (a tmpfs holding the mount points) becomes
	// read-only too: only /work and /tmp take writes.
	a = append(a, "--remount-ro", "/", "--chdir", "/work", "--clearenv")
	env := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
		// Test runners run once instead of watching; no colour codes.
		"CI": "true", "NO_COLOR": "1", "FORCE_COLOR": "0",
		"npm_config_update_notifier": "false", "npm_config_fund": "false", "npm_config_audit": "false",
	}
	for k, v := range sp.env {
		env[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		a = append(a, "--setenv", k, env[k])
	}
	l := s.cfg.Limits
	a = append(a, "--")
	if sp.workBytes > 0 {
		a = append(a, "sh", "-c", supervisor(resultFD), "sh")
	}
	a = append(a, s.prlimit,
		"--cpu="+strconv.Itoa(l.CPUSeconds), "--data="+strconv.FormatInt(l.MemoryBytes, 10),
		"--nproc="+strconv.Itoa(l.Processes), "--fsize="+strconv.FormatInt(l.FileBytes, 10), "--")
	return append(a, sp.argv...)
}

// exec runs one sandboxed process to its end or its timeout. On timeout or
// when ctx ends the whole process group is killed, and exec returns only
// once every process of the sandbox is gone. An error means the sandbox
// itself failed; a command that fails is a non-zero exitCode.
func (s *Sandbox) exec(ctx context.Context, sp spec) (execResult, error) {
	out := newCapture(s.cfg.MaxOutputBytes)
	var collected chan error
	resultFD := -1
	var resultW *os.File
	if sp.collect != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return execResult{}, fmt.Errorf("sandbox result pipe: %w", err)
		}
		resultW, resultFD, collected = w, 5, make(chan error, 1)
		go func() {
			err := sp.collect(r)
			// Whatever collect left unread: the sandbox must not block on it.
			_, _ = io.Copy(io.Discard, r)
			r.Close()
			collected <- err
		}()
		defer func() {
			if resultW != nil {
				resultW.Close()
				<-collected
			}
		}()
	}
	// The sandbox's cgroup: bwrap and the sandbox's init join it while the
	// init waits on the block pipe, before anything runs in the sandbox.
	var group *cgroup
	var blockR, blockW *os.File
	blockFD := -1
	if s.cgroups != nil {
		l := s.cfg.Limits
		var err error
		if group, err = s.cgroups.leaf(l.SandboxMemoryBytes, l.Processes); err != nil {
			return execResult{}, err
		}
		defer func() {
			if err := group.remove(); err != nil {
				s.cfg.Logger.Warn("remove a sandbox's cgroup", slog.String("err", err.Error()))
			}
		}()
		if blockR, blockW, err = os.Pipe(); err != nil {
			return execResult{}, fmt.Errorf("sandbox block pipe: %w", err)
		}
		defer blockW.Close()
		blockFD = 5
		if resultW != nil {
			blockFD = 6
		}
	}
	cmd := exec.Command(s.bwrap, s.args(sp, resultFD, blockFD)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{} // bwrap itself gets nothing either
	cmd.Dir = "/"
	cmd.WaitDelay = 5 * time.Second // a leaked pipe holder cannot hang us
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.asUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.cfg.UID), Gid: uint32(s.cfg.GID), Groups: []uint32{}}
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		if blockR != nil {
			blockR.Close()
		}
		return execResult{}, fmt.Errorf("sandbox info pipe: %w", err)
	}
	defer infoR.Close()
	filter, err := s.filterFile()
	if err != nil {
		infoW.Close()
		if blockR != nil {
			blockR.Close()
		}
		return execResult{}, err
	}
	// Only these descriptors reach bwrap: 3 and 4, and the block pipe's,
	// which it closes, and 5, the result's, for the supervisor.
	cmd.ExtraFiles = []*os.File{infoW, filter}
	if resultW != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, resultW)
	}
	if blockR != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, blockR)
	}
	start := time.Now()
	err = cmd.Start()
	infoW.Close()
	filter.Close()
	if resultW != nil {
		resultW.Close()
		resultW = nil
	}
	if blockR != nil {
		blockR.Close()
	}
	if err != nil {
		return execResult{}, fmt.Errorf("start %s: %w", s.bwrap, err)
	}
	// bwrap reports the host pid of the sandbox's init: once it is gone, so
	// is every process of the sandbox (its pid namespace dies with it).
	type sandboxInit struct{ pid, fd int }
	initCh := make(chan sandboxInit, 1)
	go func() {
		var info struct {
			ChildPID int `json:"child-pid"`
		}
		in := sandboxInit{fd: -1}
		if json.NewDecoder(infoR).Decode(&info) == nil && info.ChildPID > 0 {
			in.pid = info.ChildPID
			if f, err := unix.PidfdOpen(info.ChildPID, 0); err == nil {
				in.fd = f
			}
		}
		initCh <- in
	}()

	var timedOut, killed atomic.Bool
	var overQuota atomic.Pointer[string]
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	timer := time.AfterFunc(sp.timeout, func() { timedOut.Store(true); kill() })
	stop := context.AfterFunc(ctx, func() { killed.Store(true); kill() })
	var init sandboxInit
	var capErr error
	if group != nil {
		// The init waits on the block pipe: nothing of the sandbox runs
		// until both are in its cgroup, and nothing runs if they cannot be.
		init = <-initCh
		initCh <- init
		if init.pid > 0 {
			if capErr = group.add(cmd.Process.Pid, init.pid); capErr != nil {
				kill()
			} else {
				_, _ = blockW.Write([]byte{0})
			}
		}
	}
	exited := make(chan struct{})
	var watched <-chan struct{}
	if sp.quota != nil {
		watched = sp.quota.watch(exited, func(why string) { overQuota.Store(&why); kill() })
	}
	waitErr := cmd.Wait()
	close(exited)
	timer.Stop()
	stop()
	if sp.quota != nil {
		<-watched
	}
	res := execResult{duration: time.Since(start), output: out.output(), exitCode: -1}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	infoR.Close() // unblocks the reader if bwrap never wrote
	if in := <-initCh; in.fd >= 0 {
		err := waitGone(in.fd, 10*time.Second)
		unix.Close(in.fd)
		if err != nil {
			return res, err
		}
	}
	if capErr != nil {
		return res, capErr
	}
	if group != nil {
		res.overMemory = s.overMemory(group)
	}
	if collected != nil {
		// Every process of the sandbox is gone: the stream has ended.
		res.collected = <-collected
	}
	if why := overQuota.Load(); why != nil {
		res.overQuota = *why
	} else if sp.quota != nil && !killed.Load() {
		// What it wrote since the last measure.
		res.overQuota = sp.quota.over()
	}
	switch {
	case killed.Load():
		return res, fmt.Errorf("sandboxed %s stopped: %w", sp.argv[0], context.Cause(ctx))
	case res.overQuota != "":
		res.exitCode = -1
		return res, nil
	case timedOut.Load():
		res.timedOut, res.exitCode = true, -1
		return res, nil
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return res, fmt.Errorf("run sandboxed %s: %w", sp.argv[0], waitErr)
	}
	return res, nil
}

// overMemory says how the sandbox of group reached its caps as a whole, or "".
func (s *Sandbox) overMemory(group *cgroup) string {
	ooms, forks := group.hits()
	var why []string
	if ooms > 0 {
		why = append(why, fmt.Sprintf("it used more than %d MiB of memory as a whole (its processes, shared memory and files in /work, /tmp and /dev/shm): the kernel killed %d of its processes", s.cfg.Limits.SandboxMemoryBytes>>20, ooms))
	}
	if forks > 0 {
		why = append(why, fmt.Sprintf("it reached %d processes and threads as a whole: %d more were refused", s.cfg.Limits.Processes, forks))
	}
	return strings.Join(why, "; ")
}

// filterFile returns a pipe's read end holding the seccomp filter, for
// bwrap to read.
func (s *Sandbox) filterFile() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter pipe: %w", err)
	}
	// The filter (a few hundred bytes) fits in the pipe's buffer.
	_, werr := w.Write(s.seccomp)
	if err := errors.Join(werr, w.Close()); err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp filter pipe: %w", err)
	}
	return r, nil
}

// waitGone waits until the process of a pidfd has exited.
func waitGone(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("a sandboxed process was still running after the sandbox was killed")
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the sandbox to end: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

// The files of a fresh /proc that describe the whole host rather than the
// sandbox's PID namespace (interrupts and timers per CPU with the host's
// process names, the kernel's keys and memory, hardware tables): each is
// read empty, as container runtimes mask them. bwrap already makes
// /proc/sys, /proc/sysrq-trigger, /proc/irq and /proc/bus read-only.
var (
	maskedHostFiles = []string{"/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/sched_debug", "/proc/timer_list", "/proc/timer_stats"}
	maskedHostDirs = []string{"/proc/acpi", "/proc/asound", "/proc/scsi"}
)

// hostMasks is maskHostState, worked out once: the paths the kernel has do
// not change while the process runs.
var hostMasks = sync.OnceValue(maskHostState)

// maskHostState is the bwrap arguments that mask those of the host's
// kernel state the sandbox would see: a file by /dev/null, a directory by
// an empty read-only tmpfs. Only paths the kernel has are masked (bwrap
// cannot mount over a missing one).
func maskHostState() []string {
	var a []string
	for _, f := range maskedHostFiles {
		if fi, err := os.Stat(f); err == nil && !fi.IsDir() {
			a = append(a, "--ro-bind", "/dev/null", f)
		}
	}
	for _, d := range maskedHostDirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			a = append(a, "--size", "4096", "--perms", "0555", "--tmpfs", d, "--remount-ro", d)
		}
	}
	return a
}
