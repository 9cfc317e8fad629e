package loopback_test

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
)

func TestFreePortCanBeListenedOn(t *testing.T) {
	t.Parallel()
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", port, err)
	}
	l.Close()
}

// TestFreePortsAreDistinctAndOutsideTheEphemeralRange: an outgoing
// connection cannot take a port between FreePort and the server's bind,
// and two servers of one process never get the same port.
func TestFreePortsAreDistinctAndOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral range to stay out of: %v", err)
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil {
		t.Fatalf("parse %q: %v", b, err)
	}
	seen := map[int]bool{}
	for range 200 {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= first && port <= last {
			t.Errorf("FreePort() = %d, inside the ephemeral range %d-%d", port, first, last)
		}
		if seen[port] {
			t.Errorf("FreePort() gave %d twice", port)
		}
		seen[port] = true
	}
}
