package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegistryProxyReachesOnlyTheRegistry: a CONNECT to the registry's
// host and port is tunnelled; to any other host or port, or a registry
// whose name resolves to a loopback address, it is refused.
func TestRegistryProxyReachesOnlyTheRegistry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, registry, request string
		status                  int
	}{
		{"Registry", defaultRegistry, "CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: registry.npmjs.org:443\r\n\r\n", 200},
		{"Loopback", defaultRegistry, "CONNECT 127.0.0.1:5432 HTTP/1.1\r\nHost: 127.0.0.1:5432\r\n\r\n", 403},
		{"OtherPort", defaultRegistry, "CONNECT registry.npmjs.org:80 HTTP/1.1\r\nHost: registry.npmjs.org:80\r\n\r\n", 403},
		{"OtherHost", defaultRegistry, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 403},
		{"PlainGet", defaultRegistry, "GET http://127.0.0.1:5432/ HTTP/1.1\r\nHost: 127.0.0.1:5432\r\n\r\n", 403},
		{"RegistryOnLoopback", "https://localhost:5432/", "CONNECT localhost:5432 HTTP/1.1\r\nHost: localhost:5432\r\n\r\n", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, err := os.MkdirTemp("", "aw-proxy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			p, err := startRegistryProxy(filepath.Join(dir, "s"), tc.registry, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			c, err := net.Dial("unix", filepath.Join(dir, "s"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"104.16.0.1": true, "2606:4700::6810:1": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "100.64.0.1": false, "0.0.0.0": false,
		"::ffff:127.0.0.1": false, "64:ff9b::7f00:1": false, "224.0.0.1": false,
	} {
		if got := publicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestTheInstallStepHasNoNetworkButTheRegistry: the install sandbox's
// processes cannot reach the host's loopback, directly or through the
// registry proxy, while a fresh install of the fixture through the proxy
// succeeds.
func TestTheInstallStepHasNoNetworkButTheRegistry(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := reachableDir(t)
	sock := filepath.Join(dir, "registry.sock")
	proxy, err := startRegistryProxy(sock, sb.cfg.Registry, sb.cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ws := reachableDir(t)
	if err := sb.own(ws); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
const net = require('net');
net.connect(%d, '127.0.0.1').on('connect', () => { console.log('DIRECT CONNECTED'); process.exit(0) }).on('error', e => {
  console.log('DIRECT FAILED', e.code);
  const c = net.connect('%s', () => c.write('CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n'));
  c.on('data', d => { console.log('PROXY ' + d.toString().split('\r\n')[0]); process.exit(3) });
  c.on('error', e => { console.log('PROXY FAILED', e.code); process.exit(3) });
});`, port, registrySocket, port, port)
	res, err := sb.exec(t.Context(), spec{workspace: ws, registry: sock, argv: []string{"node", "-e", script}, timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := res.output.Full()
	if !strings.Contains(out, "DIRECT FAILED") || !strings.Contains(out, "PROXY HTTP/1.1 403 Forbidden") {
		t.Fatalf("exit %d:\n%s", res.exitCode, out)
	}
	select {
	case <-accepted:
		t.Fatal("the host's loopback listener accepted a connection from the install sandbox")
	default:
	}
}

// reachableDir is a directory the sandbox's user can reach (t.TempDir's
// are private to root).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "aw-sandbox-internal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newTestSandbox(t *testing.T) *Sandbox {
	t.Helper()
	sb, err := New(t.Context(), Config{Dir: reachableDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestAGitDependencyPastTheChecksFetchesNothing: were a git dependency to
// pass the source checks, npm could still not fetch it: git is pinned to a
// program that does not exist, and the sandbox has no network but the
// registry proxy. The loopback server it names sees no request.
func TestAGitDependencyPastTheChecksFetchesNothing(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	pkg := fmt.Sprintf(`{"name": "p", "version": "1.0.0", "dependencies": {"outer": "git+http://%s/outer.git"}}`, ln.Addr())
	dir := filepath.Join(sb.deps.dir, "git-test")
	res, err := sb.deps.install(t.Context(), "p", "git-test", dir, []byte(pkg), "", nil, "npm install")
	if err != nil {
		t.Fatal(err)
	}
	if res == nil || res.exitCode == 0 {
		t.Fatalf("the install succeeded: %+v", res)
	}
	select {
	case <-accepted:
		t.Fatal("the install reached the loopback server")
	default:
	}
	t.Logf("npm: %s", strings.TrimSpace(res.output.Full()))
}
