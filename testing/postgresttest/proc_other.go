//go:build !linux

package postgresttest

import "syscall"

// dieWithParent returns nil: only Linux has a parent-death signal.
func dieWithParent() *syscall.SysProcAttr { return nil }
