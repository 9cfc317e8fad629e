// Package poll waits in tests for a condition that has no signal to wait
// on (a row changing, a process exiting): it checks it until a deadline.
package poll

import (
	"testing"
	"time"
)

// Interval is the time between two checks.
const Interval = 10 * time.Millisecond

// Until checks cond every Interval until it holds, and fails the test
// naming what it waited for when d passes or the test's context ends.
func Until(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", d, what)
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}
