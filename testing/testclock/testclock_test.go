package testclock_test

import (
	"testing"
	"time"

	"github.com/agentworker/agentworker/testing/testclock"
)

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := testclock.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	c.Advance(90 * time.Second)
	if got := c.Now(); !got.Equal(start.Add(90 * time.Second)) {
		t.Errorf("Now after Advance(90s) = %v, want %v", got, start.Add(90*time.Second))
	}
}
