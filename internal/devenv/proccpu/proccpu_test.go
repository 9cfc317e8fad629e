package proccpu

import (
	"os"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stat  string
		ticks int64
		ok    bool
	}{
		{"Plain", "42 (postgres) S 1 42 42 0 -1 4194304 100 0 0 0 7 5 0 0 20 0 1 0", 12, true},
		{"NameWithSpacesAndParens", "42 (a) b (c)) R 1 42 42 0 -1 4194304 100 0 0 0 30 4 0 0", 34, true},
		{"Truncated", "42 (postgres) S 1 42 42", 0, false},
		{"NoName", "42 postgres S 1", 0, false},
		{"NotANumber", "42 (x) S 1 42 42 0 -1 4194304 100 0 0 0 u s 0 0", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if ticks, ok := parse(tt.stat); ticks != tt.ticks || ok != tt.ok {
				t.Errorf("parse(%q) = %d, %v; want %d, %v", tt.stat, ticks, ok, tt.ticks, tt.ok)
			}
		})
	}
}

// TestTicksOfThisProcess: spending CPU shows in the process's own ticks,
// and a process that is not there reads as nothing.
func TestTicksOfThisProcess(t *testing.T) { // not parallel: it measures its own CPU
	self := os.Getpid()
	before, ok := Ticks(self)
	if !ok {
		t.Fatalf("cannot read this process's CPU time")
	}
	// Spin (CPU time, not a wait) until 10 ticks show, within a bound.
	var after int64
	for start := time.Now(); after-before < 10; after, _ = Ticks(self) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("10 s of spinning added %d ticks, want at least 10", after-before)
		}
		for spin := time.Now(); time.Since(spin) < 10*time.Millisecond; {
		}
	}
	if _, ok := Ticks(-1); ok {
		t.Error("a process that does not exist was read")
	}
	if sum, now := Sum([]int{self, -1}), after; sum < now {
		t.Errorf("Sum of this process and a missing one = %d, want at least this process's %d", sum, now)
	}
}

// TestMachineCountsThisMachine: the machine's ticks move forward, busy
// within total.
func TestMachineCountsThisMachine(t *testing.T) {
	t.Parallel()
	b0, t0, ok := Machine()
	if !ok {
		t.Fatal("cannot read /proc/stat")
	}
	time.Sleep(50 * time.Millisecond)
	b1, t1, ok := Machine()
	if !ok {
		t.Fatal("cannot read /proc/stat")
	}
	if t1 <= t0 || b1 < b0 || b1-b0 > t1-t0 {
		t.Errorf("busy %g → %g of total %g → %g: want total to move and busy within it", b0, b1, t0, t1)
	}
}
