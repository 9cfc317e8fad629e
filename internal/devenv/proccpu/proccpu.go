// Package proccpu reads how much CPU time processes of this machine have
// used, from /proc, for benchmarks that run the worker or the database as
// processes of their own.
package proccpu

import (
	"time"

	"github.com/prometheus/procfs"
)

// Tick is one clock tick of /proc's CPU times (USER_HZ is 100 on Linux).
const Tick = 10 * time.Millisecond

// Ticks is the user and system CPU time of process pid, in clock ticks; ok
// is false when it cannot be read (no such process on this machine).
func Ticks(pid int) (ticks int64, ok bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return int64(st.UTime + st.STime), true
}

// Sum is the CPU time of those of pids that can be read, in clock ticks.
func Sum(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		t, _ := Ticks(pid)
		sum += t
	}
	return sum
}

// Machine is the CPU time of the whole machine, all CPUs together, in
// seconds: busy (anything but idle and waiting for I/O) and total; ok is
// false when /proc/stat cannot be read.
func Machine() (busy, total float64, ok bool) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, false
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, false
	}
	c := st.CPUTotal // guest time is already counted in user and nice
	busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return busy, busy + c.Idle + c.Iowait, true
}
