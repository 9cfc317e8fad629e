package poll_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentworker/agentworker/testing/poll"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	poll.Until(t, "three checks", time.Second, func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("checked %d times", n.Load())
	}
}

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(r) }

func TestUntilFailsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		poll.Until(r, "never", 30*time.Millisecond, func() bool { return false })
	}()
	if !r.failed {
		t.Fatal("Until returned without the condition or a failure")
	}
}
