package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUncapped reports that no cgroup can cap a sandbox's memory as a
// whole here: the rlimits hold per process only, and memory shared
// between processes (MAP_SHARED, a tmpfs) is not counted by them.
var ErrUncapped = errors.New("no cgroup can cap the sandbox's memory as a whole")

// cgroups is where the cgroup of each sandbox is made: a directory of
// this process's own cgroup with the memory and pids controllers, in the
// unified (v2) hierarchy, or else in the v1 memory and pids hierarchies.
type cgroups struct {
	version int
	dirs    []string // v2: one; v1: memory's, and pids' when mounted
}

// findCgroups finds where this process can make cgroups that cap memory,
// trying one out. mountinfo and self are /proc/self/mountinfo and
// /proc/self/cgroup.
func findCgroups(mountinfo, self string) (*cgroups, error) {
	mounts, err := readMounts(mountinfo)
	if err != nil {
		return nil, err
	}
	own, err := readOwnCgroups(self)
	if err != nil {
		return nil, err
	}
	var why []string
	if m, ok := mounts["cgroup2"]; ok {
		cg, err := unifiedCgroups(filepath.Join(m.dir, strings.TrimPrefix(own[""], m.root)))
		if err == nil {
			return cg, cg.try()
		}
		why = append(why, "cgroup v2: "+err.Error())
	}
	if m, ok := mounts["memory"]; ok {
		cg := &cgroups{version: 1, dirs: []string{filepath.Join(m.dir, strings.TrimPrefix(own["memory"], m.root))}}
		if p, ok := mounts["pids"]; ok {
			cg.dirs = append(cg.dirs, filepath.Join(p.dir, strings.TrimPrefix(own["pids"], p.root)))
		}
		err := cg.try()
		if err == nil {
			return cg, nil
		}
		why = append(why, "cgroup v1: "+err.Error())
	}
	if len(why) == 0 {
		return nil, fmt.Errorf("%w: neither a cgroup v2 nor a cgroup v1 memory hierarchy is mounted", ErrUncapped)
	}
	return nil, fmt.Errorf("%w: %s", ErrUncapped, strings.Join(why, "; "))
}

type mount struct{ dir, root string }

// readMounts returns the cgroup mounts by controller ("cgroup2" for the
// unified hierarchy).
func readMounts(mountinfo string) (map[string]mount, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUncapped, err)
	}
	defer f.Close()
	mounts := map[string]mount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional…] - type source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 {
			continue
		}
		m := mount{dir: fields[4], root: fields[3]}
		switch tail[0] {
		case "cgroup2":
			mounts["cgroup2"] = m
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if opt == "memory" || opt == "pids" {
					mounts[opt] = m
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUncapped, mountinfo, err)
	}
	return mounts, nil
}

// readOwnCgroups returns this process's cgroup path by controller ("" for
// the unified hierarchy).
func readOwnCgroups(self string) (map[string]string, error) {
	b, err := os.ReadFile(self)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUncapped, err)
	}
	own := map[string]string{}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, nil
}

// unifiedCgroups makes dir, this process's cgroup v2, one that can hold
// sandboxes' cgroups with the memory and pids controllers. A cgroup
// holding processes cannot give controllers to its children: this process
// moves into a child of its own first, "worker".
func unifiedCgroups(dir string) (*cgroups, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(string(b))
	if !slices.Contains(have, "memory") || !slices.Contains(have, "pids") {
		return nil, fmt.Errorf("%s has the controllers %q, not memory and pids", dir, have)
	}
	control := filepath.Join(dir, "cgroup.subtree_control")
	if b, err := os.ReadFile(control); err == nil {
		on := strings.Fields(string(b))
		if slices.Contains(on, "memory") && slices.Contains(on, "pids") {
			return &cgroups{version: 2, dirs: []string{dir}}, nil
		}
	}
	err = os.WriteFile(control, []byte("+memory +pids"), 0)
	if errors.Is(err, syscall.EBUSY) {
		worker := filepath.Join(dir, "worker")
		if err := os.Mkdir(worker, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(worker, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return nil, fmt.Errorf("move this process into %s: %w", worker, err)
		}
		err = os.WriteFile(control, []byte("+memory +pids"), 0)
	}
	if err != nil {
		return nil, fmt.Errorf("enable memory and pids for the children of %s: %w", dir, err)
	}
	return &cgroups{version: 2, dirs: []string{dir}}, nil
}

// try makes a cgroup and removes it, and removes the cgroups that
// processes now gone left (a cgroup still holding a process cannot be
// removed).
func (c *cgroups) try() error {
	for _, dir := range c.dirs {
		left, _ := filepath.Glob(filepath.Join(dir, leafPrefix+"*"))
		for _, d := range left {
			pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), leafPrefix), "-")
			if n, err := strconv.Atoi(pid); err != nil || syscall.Kill(n, 0) == syscall.ESRCH {
				_ = syscall.Rmdir(d)
			}
		}
	}
	leaf, err := c.leaf(64<<20, 8)
	if err != nil {
		return err
	}
	return leaf.remove()
}

// String says which cgroup caps hold, for /readyz and the logs.
func (c *cgroups) String() string {
	if c.version == 2 {
		return "cgroup v2 " + c.dirs[0]
	}
	return "cgroup v1 " + strings.Join(c.dirs, " and ")
}

// pidsCapped reports whether the cgroups cap processes too.
func (c *cgroups) pidsCapped() bool { return c.version == 2 || len(c.dirs) == 2 }

// leafPrefix names the cgroups of sandboxes: leafPrefix, the pid of the
// process that made it, "-", a random suffix.
const leafPrefix = "agentworker-sandbox-"

// cgroup is one sandbox's: memory (swap none) and processes capped for the
// sandbox as a whole.
type cgroup struct {
	version int
	dirs    []string // v2: one; v1: memory's, then pids'
}

// leaf makes the cgroup of one sandbox.
func (c *cgroups) leaf(memoryBytes int64, processes int) (*cgroup, error) {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := leafPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(suffix)
	g := &cgroup{version: c.version}
	for _, parent := range c.dirs {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("make the sandbox's cgroup: %w", err), g.remove())
		}
		g.dirs = append(g.dirs, dir)
	}
	mem, procs := strconv.FormatInt(memoryBytes, 10), strconv.Itoa(processes)
	var settings [][2]string // file, value: in order
	if c.version == 2 {
		settings = [][2]string{{"memory.max", mem}, {"memory.swap.max", "0"}, {"pids.max", procs}}
	} else {
		// memsw (memory and swap) exists with swap accounting; it may not be
		// set below memory's limit.
		settings = [][2]string{{"memory.limit_in_bytes", mem}, {"memory.memsw.limit_in_bytes", mem}}
		if len(g.dirs) == 2 {
			settings = append(settings, [2]string{"pids.max", procs})
		}
	}
	for _, s := range settings {
		dir := g.dirs[0]
		if c.version == 1 && strings.HasPrefix(s[0], "pids.") {
			dir = g.dirs[1]
		}
		p := filepath.Join(dir, s[0])
		if s[0] == "memory.swap.max" || s[0] == "memory.memsw.limit_in_bytes" {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting: no swap to cap
			}
		}
		if err := os.WriteFile(p, []byte(s[1]), 0); err != nil {
			return nil, errors.Join(fmt.Errorf("set the sandbox's cgroup: %w", err), g.remove())
		}
	}
	return g, nil
}

// add moves processes into the cgroup.
func (g *cgroup) add(pids ...int) error {
	for _, dir := range g.dirs {
		for _, pid := range pids {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				return fmt.Errorf("move the sandbox into its cgroup: %w", err)
			}
		}
	}
	return nil
}

// hits says which caps the sandbox reached: the processes the kernel
// killed for memory, the forks refused for the process cap.
func (g *cgroup) hits() (oomKills, forksRefused int) {
	count := func(file, key string) int {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0
		}
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	if g.version == 2 {
		return count(filepath.Join(g.dirs[0], "memory.events"), "oom_kill"), count(filepath.Join(g.dirs[0], "pids.events"), "max")
	}
	oomKills = count(filepath.Join(g.dirs[0], "memory.oom_control"), "oom_kill")
	if len(g.dirs) == 2 {
		forksRefused = count(filepath.Join(g.dirs[1], "pids.events"), "max")
	}
	return oomKills, forksRefused
}

// remove removes the cgroup once its processes are gone (the kernel
// lets go of an exited process a moment after its parent reaped it).
func (g *cgroup) remove() error {
	var errs []error
	for _, dir := range g.dirs {
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := syscall.Rmdir(dir)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove the sandbox's cgroup %s: %w", dir, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
