package supervise

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// dieWithParent has the kernel kill the child when the thread that started
// it ends.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// Running reports whether process pid runs; a zombie, killed but not yet
// reaped, does not.
func Running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err == nil {
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			return stat[i+2] != 'Z' && stat[i+2] != 'X'
		}
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
