package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is the garbage collector's target when GOGC is unset. A
// worker's heap is mostly short-lived: request and response bodies, event
// payloads and rows, dropped once a call or a statement returns. At 400
// the collector runs a quarter as often as at Go's default of 100: on the
// instant-model bench one serve process went from 4.5 to 3.1 ms of worker
// CPU per task, and from 171 to 218 tasks/s.
// The heap may then grow to five times its live size, so a memory limit
// from the container, when there is one, keeps it in bounds.
const defaultGCPercent = 400

// cgroupMemoryMax is where cgroup v2 gives a container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// memoryLimitShare is the part of a container's memory limit the Go heap may
// reach before the collector runs regardless of GOGC: the rest is left to
// stacks, the runtime and the kernel's accounting of the process.
const memoryLimitShare = 0.9

// gcSettings returns the collector's target percent and soft memory limit
// (0: none) for a process whose environment is getenv and whose container
// memory limit file is at limitFile: GOGC and GOMEMLIMIT, when set, are the
// Go runtime's own business and left alone (setPercent, setLimit false).
func gcSettings(getenv func(string) string, limitFile string) (percent int, limit int64, setPercent, setLimit bool) {
	if getenv("GOGC") == "" {
		percent, setPercent = defaultGCPercent, true
	}
	if getenv("GOMEMLIMIT") == "" {
		if b, err := os.ReadFile(limitFile); err == nil {
			// "max" means no limit; anything that is not a byte count is ignored.
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
				limit, setLimit = int64(float64(n)*memoryLimitShare), true
			}
		}
	}
	return percent, limit, setPercent, setLimit
}

// tuneGC applies gcSettings to this process.
func tuneGC() {
	percent, limit, setPercent, setLimit := gcSettings(os.Getenv, cgroupMemoryMax)
	if setPercent {
		debug.SetGCPercent(percent)
	}
	if setLimit {
		debug.SetMemoryLimit(limit)
	}
}
