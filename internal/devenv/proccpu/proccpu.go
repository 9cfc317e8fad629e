// Package proccpu reads how much CPU time processes of this machine have
// used, from /proc, for benchmarks that run the worker or the database as
// processes of their own.
package proccpu

import (
	"os"
	"strconv"
	"strings"
	"time"
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

// Machine is the CPU time of the whole machine, all CPUs together, in clock
// ticks: busy (anything but idle and waiting for I/O) and total; ok is false
// when /proc/stat cannot be read.
func Machine() (busy, total int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseMachine(line)
}

// parseMachine reads /proc/stat's first line: "cpu" and the ticks spent in
// user, nice, system, idle, iowait, irq, softirq, steal (and guest time,
// already counted in user and nice).
func parseMachine(line string) (busy, total int64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:9] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}
