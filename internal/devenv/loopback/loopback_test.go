package loopback_test

import (
	"fmt"
	"net"
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
