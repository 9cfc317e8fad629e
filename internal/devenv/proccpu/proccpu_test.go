package proccpu

import (
	"os"
	"testing"
	"time"
)

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
	// The seconds are sums of float ticks: a fully busy machine may show
	// busy a rounding error past total.
	if t1 <= t0 || b1 < b0 || b1-b0 > t1-t0+1e-6 {
		t.Errorf("busy %g → %g of total %g → %g: want total to move and busy within it", b0, b1, t0, t1)
	}
}
