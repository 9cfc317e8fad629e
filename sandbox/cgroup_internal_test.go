package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/testing/prereq"
)

// noCgroups is a mountinfo without cgroup mounts: a host where no cgroup
// can cap a sandbox.
func noCgroups(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte("22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedMemoryIsCappedAsAWhole: a process maps 1 GiB shared anonymous
// memory (MAP_SHARED|MAP_ANONYMOUS) and writes it page by page against a
// per-process data limit of 256 MiB, which does not count it. In the
// sandbox's cgroup (384 MiB) the kernel kills it; where the operator
// allowed sandboxes without a cgroup, it writes all of it.
func TestSharedMemoryIsCappedAsAWhole(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		prereq.MissingFromMachine(t, "python3 (under /usr, which the sandbox sees)", "install the python3 package", err)
	}
	script := `import mmap
m = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
for i in range(0, 1 << 30, 4096):
    m[i] = 1
print("WROTE 1024 MiB")`
	for _, tc := range []struct {
		name   string
		capped bool
	}{{"Capped", true}, {"Uncapped", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Dir: reachableDir(t), Limits: Limits{MemoryBytes: 256 << 20, SandboxMemoryBytes: 384 << 20}}
			if !tc.capped {
				cfg.AllowUncapped, cfg.mountinfo = true, noCgroups(t)
			}
			sb, err := New(t.Context(), cfg)
			if errors.Is(err, ErrUncapped) {
				prereq.MissingFromMachine(t, "a cgroup this process may divide (memory and pids controllers)", "run the tests as root, or in a delegated cgroup v2", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			ws := reachableDir(t)
			if err := sb.own(ws); err != nil {
				t.Fatal(err)
			}
			res, err := sb.exec(t.Context(), spec{workspace: ws, argv: []string{"python3", "-c", script}, timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			out := res.output.Full()
			wrote := strings.Contains(out, "WROTE 1024 MiB")
			switch {
			case tc.capped && (wrote || res.exitCode == 0 || res.overMemory != "it used more than 384 MiB of memory as a whole (its processes, shared memory and files in /work, /tmp and /dev/shm): the kernel killed 1 of its processes"):
				t.Errorf("capped: exit %d, over memory %q\n%s", res.exitCode, res.overMemory, out)
			case !tc.capped && (!wrote || res.exitCode != 0 || res.overMemory != ""):
				t.Errorf("uncapped: exit %d, over memory %q\n%s", res.exitCode, res.overMemory, out)
			}
			t.Logf("%s: %s", tc.name, sb.Limits())
		})
	}
}

// TestNoCgroupRefusesCommands: where no cgroup can cap a sandbox, New
// refuses, saying why and what to do, unless the operator allowed it; then
// Limits says that nothing caps the sandbox as a whole.
func TestNoCgroupRefusesCommands(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Config{Dir: reachableDir(t), mountinfo: noCgroups(t)})
	want := "sandbox unavailable: no cgroup can cap the sandbox's memory as a whole: neither a cgroup v2 nor a cgroup v1 memory hierarchy is mounted: give this process a cgroup it may divide, with the memory and pids controllers (cgroup v2, delegated), or allow commands without that cap"
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrUncapped) || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	sb, err := New(t.Context(), Config{Dir: reachableDir(t), mountinfo: noCgroups(t), AllowUncapped: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.Limits(); !strings.HasPrefix(got, "no memory or process cap for the sandbox as a whole (allowed uncapped: ") ||
		!strings.Contains(got, "per process: data 2048 MiB, CPU 120 s, file size 256 MiB, 256 processes of its user; tmpfs: workspace 512 MiB, /tmp 256 MiB, /dev/shm 16 MiB") {
		t.Errorf("limits: %s", got)
	}
}

// TestFindCgroups reads the cgroups of a host in hybrid mode (a unified
// hierarchy without the memory controller beside v1 hierarchies), of one
// in unified mode, and of a process in a container's cgroup namespace.
func TestReadMountsAndOwnCgroups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mountinfo := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mountinfo, []byte(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 /docker/abc /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts, err := readMounts(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]mount{"memory": {"/sys/fs/cgroup/memory", "/"}, "pids": {"/sys/fs/cgroup/pids", "/"}, "cgroup2": {"/sys/fs/cgroup/unified", "/docker/abc"}}
	for k, m := range want {
		if mounts[k] != m {
			t.Errorf("%s: %+v, want %+v", k, mounts[k], m)
		}
	}
	self := filepath.Join(dir, "cgroup")
	if err := os.WriteFile(self, []byte("9:name=systemd:/\n8:pids:/\n4:memory:/process_api/42\n1:cpu,cpuacct:/\n0::/docker/abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	own, err := readOwnCgroups(self)
	if err != nil {
		t.Fatal(err)
	}
	if own["memory"] != "/process_api/42" || own["pids"] != "/" || own[""] != "/docker/abc" || own["cpuacct"] != "/" {
		t.Errorf("own cgroups: %v", own)
	}
}

// TestStartRemovesCgroupsOfGoneProcesses: a sandbox's cgroup left by a
// process that is gone is removed when a sandbox starts; one of a live
// process is not.
func TestStartRemovesCgroupsOfGoneProcesses(t *testing.T) {
	t.Parallel()
	cg, err := findCgroups("/proc/self/mountinfo", "/proc/self/cgroup")
	if errors.Is(err, ErrUncapped) {
		prereq.MissingFromMachine(t, "a cgroup this process may divide (memory and pids controllers)", "run the tests as root, or in a delegated cgroup v2", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Past the kernel's largest pid: no such process.
	gone := filepath.Join(cg.dirs[0], leafPrefix+"999999999-0123456789ab")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	mine, err := cg.leaf(64<<20, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mine.remove(); err != nil {
			t.Error(err)
		}
	})
	if err := cg.try(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup of a gone process: %v", err)
		_ = os.Remove(gone)
	}
	if _, err := os.Stat(mine.dirs[0]); err != nil {
		t.Errorf("the cgroup of this process: %v", err)
	}
}
