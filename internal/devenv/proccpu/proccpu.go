// Package proccpu reads how much CPU time processes of this machine have
// used, from /proc, for benchmarks that run the worker or the database as
// processes of their own.
package proccpu

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Tick is one clock tick of /proc's CPU times (USER_HZ is 100 on Linux).
const Tick = 10 * time.Millisecond

// Ticks is the user and system CPU time of process pid, in clock ticks; ok
// is false when it cannot be read (no such process on this machine).
func Ticks(pid int) (ticks int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parse(string(b))
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

// parse reads utime and stime from a /proc/<pid>/stat line. The command
// name (field 2, in parentheses) may hold spaces and parentheses, so fields
// are counted after its last ')': state is field 3, utime 14, stime 15.
func parse(stat string) (int64, bool) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, false
	}
	f := strings.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, false
	}
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	system, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return user + system, true
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
