//go:build !linux

package localminio

import "syscall"

// dieWithParent returns nil: only Linux has a parent-death signal, so
// elsewhere a server can outlive a parent that is killed.
func dieWithParent() *syscall.SysProcAttr { return nil }

// processAlive answers true, so that data directories are never swept
// where liveness is not checked.
func processAlive(int) bool { return true }
