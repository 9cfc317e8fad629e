//go:build !linux

package supervise

import "syscall"

// dieWithParent does nothing: only Linux has a parent-death signal.
func dieWithParent(*syscall.SysProcAttr) {}

// Running answers true: liveness is read from /proc, which only Linux has,
// so a caller never takes a process for gone.
func Running(int) bool { return true }
