package logtest_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/agentworker/agentworker/testing/logtest"
)

func TestBufferConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b logtest.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("buffer holds %d bytes, want 800", len(got))
	}
}
