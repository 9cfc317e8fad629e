package sandbox

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompFilterDecisions runs the filter in a BPF interpreter over
// seccomp_data records: what a build never needs is denied, the rest is
// allowed, and another architecture's ABI kills the process.
func TestSeccompFilterDecisions(t *testing.T) {
	t.Parallel()
	filter, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	var prog []bpf.Instruction
	for i := 0; i < len(filter); i += 8 {
		raw := bpf.RawInstruction{Op: binary.NativeEndian.Uint16(filter[i:]), Jt: filter[i+2], Jf: filter[i+3], K: binary.NativeEndian.Uint32(filter[i+4:])}
		prog = append(prog, raw.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	eperm := uint32(seccomp.ActionErrno) | uint32(unix.EPERM)
	enosys := uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)
	allow := uint32(seccomp.ActionAllow)
	kill := uint32(seccomp.ActionKillProcess)
	for _, tc := range []struct {
		name    string
		arch    uint32
		syscall string
		arg0    uint64
		want    uint32
	}{
		{"Read", 0, "read", 0, allow},
		{"Execve", 0, "execve", 0, allow},
		{"Ptrace", 0, "ptrace", 0, eperm},
		{"Mount", 0, "mount", 0, eperm},
		{"Keyctl", 0, "keyctl", 0, eperm},
		{"Bpf", 0, "bpf", 0, eperm},
		{"PerfEventOpen", 0, "perf_event_open", 0, eperm},
		{"Unshare", 0, "unshare", 0, eperm},
		{"Setns", 0, "setns", 0, eperm},
		{"CloneAThread", 0, "clone", unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD, allow},
		{"CloneAProcess", 0, "clone", uint64(unix.SIGCHLD), allow},
		{"CloneANewUserNamespace", 0, "clone", unix.CLONE_NEWUSER | uint64(unix.SIGCHLD), eperm},
		{"CloneANewMountNamespace", 0, "clone", unix.CLONE_NEWNS, eperm},
		{"Clone3", 0, "clone3", 0, enosys},
		{"IoUring", 0, "io_uring_setup", 0, enosys},
		{"AnotherArchitecture", 0x40000003 /* i386 */, "read", 0, kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr, ok := native.SyscallNames[tc.syscall]
			if !ok {
				t.Fatalf("no syscall %s", tc.syscall)
			}
			a := tc.arch
			if a == 0 {
				a = uint32(native.ID)
			}
			// struct seccomp_data: nr, arch, instruction pointer, args; the
			// interpreter loads words big-endian, each half of an argument
			// where the filter reads it.
			data := make([]byte, 64)
			binary.BigEndian.PutUint32(data[0:], uint32(nr))
			binary.BigEndian.PutUint32(data[4:], a)
			binary.BigEndian.PutUint32(data[16:], uint32(tc.arg0))
			binary.BigEndian.PutUint32(data[20:], uint32(tc.arg0>>32))
			got, err := vm.Run(data)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != tc.want {
				t.Errorf("%s: %#x, want %#x", tc.syscall, got, tc.want)
			}
		})
	}
}

// TestSandboxedProcessesRunUnderTheFilter: a sandboxed process has the
// filter (Seccomp: 2), no new privileges, runs as the sandbox's user, and
// cannot make a new namespace.
func TestSandboxedProcessesRunUnderTheFilter(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	ws := reachableDir(t)
	if err := sb.own(ws); err != nil {
		t.Fatal(err)
	}
	script := "grep -E '^(Seccomp|NoNewPrivs|Uid):' /proc/self/status; unshare --mount --user true; echo unshare=$?"
	res, err := sb.exec(t.Context(), spec{workspace: ws, argv: []string{"sh", "-c", script}, timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := res.output.Full()
	for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "unshare failed: Operation not permitted", "unshare=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if sb.asUser && !strings.Contains(out, "Uid:\t65534") {
		t.Errorf("not the sandbox's user:\n%s", out)
	}
}
