package postgresttest

import "syscall"

// dieWithParent has the kernel kill PostgREST when the test binary ends.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
