package sandbox

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls are what a build, a test or an install never needs and a
// way out of a sandbox often starts with: tracing or reading other
// processes, mounting, namespaces, the kernel's keyring, BPF, perf events,
// kernel modules, clocks and the machine's state. They fail with EPERM.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick",
	"unshare", "setns",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init",
	"open_by_handle_at", "name_to_handle_at",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup",
	"iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"lookup_dcookie", "uselib",
}

// enosysSyscalls fail as if the kernel lacked them, so that callers fall
// back: clone3 (its flags are in memory a filter cannot read; glibc then
// uses clone, whose flags it can) and io_uring (libuv uses it when present).
var enosysSyscalls = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// namespaceFlags are the clone flags that create namespaces: a clone that
// sets any fails with EPERM.
var namespaceFlags = []uint64{
	unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
	unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP,
}

// seccompFilter returns the sandbox's seccomp filter as bubblewrap reads it
// (--seccomp FD): an array of struct sock_filter in the host's byte order.
// Every other syscall is allowed; a syscall of another architecture's ABI
// (a 32-bit int 0x80 call, whose numbers differ) kills the process.
func seccompFilter() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// One entry per flag: the entries of a name are or-ed.
	var clone []seccomp.NameWithConditions
	for _, f := range namespaceFlags {
		clone = append(clone, seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: f}}})
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: deniedSyscalls},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: enosysSyscalls},
			{Action: seccomp.ActionErrno, NamesWithCondtions: clone},
		},
	}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// The policy allows a syscall of another architecture; this prefix
	// kills the process first.
	prog = append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}, prog...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}
