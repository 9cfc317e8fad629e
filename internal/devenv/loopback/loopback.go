// Package loopback finds free ports on 127.0.0.1 for the private servers
// (PostgreSQL, MinIO, PostgREST) that development and tests start.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports are taken from below the kernel's ephemeral range: a port from
// inside it can be taken, between the check and the server's bind, by any
// outgoing connection on the machine, and a test run opens thousands.
const (
	lowestPort = 20000
	tries      = 64
	rangeFile  = "/proc/sys/net/ipv4/ip_local_port_range"
)

var (
	mu     sync.Mutex
	handed = map[int]bool{} // never hand one port out twice in a process
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// outside the ephemeral range where the kernel knows it, and not returned
// before by this process.
func FreePort() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if first, err := ephemeralStart(); err == nil && first > lowestPort {
		for range tries {
			port := lowestPort + rand.IntN(first-lowestPort)
			if !handed[port] && canListen(port) {
				handed[port] = true
				return port, nil
			}
		}
	}
	// No range known, or it left nothing free: any port the kernel picks.
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handed[port] {
			handed[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port on 127.0.0.1: every port tried was handed out before")
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralStart reads the first port of the kernel's ephemeral range.
func ephemeralStart() (int, error) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, fmt.Errorf("%s: want two ports, got %q", rangeFile, b)
	}
	return strconv.Atoi(fields[0])
}
