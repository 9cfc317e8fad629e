package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// registrySocket is where an install sees the registry proxy's socket.
const registrySocket = "/run/registry.sock"

// registryForwarder runs inside the install sandbox, which has no network
// of its own: it listens on the sandbox's loopback and forwards each
// connection to the host's registry proxy through its unix socket, then
// runs the install with that listener as npm's proxy.
const registryForwarder = `
const net = require('net'), { spawn } = require('child_process');
const srv = net.createServer(c => {
  const u = net.connect('` + registrySocket + `');
  c.pipe(u); u.pipe(c);
  c.on('error', () => u.destroy()); u.on('error', () => c.destroy());
});
srv.listen(0, '127.0.0.1', () => {
  const proxy = 'http://127.0.0.1:' + srv.address().port;
  const [cmd, ...args] = process.argv.slice(1);
  const child = spawn(cmd, [...args, '--proxy=' + proxy, '--https-proxy=' + proxy, '--noproxy='], { stdio: 'inherit' });
  child.on('error', e => { console.error(cmd + ': ' + e.message); process.exit(127); });
  child.on('exit', (code, signal) => process.exit(code === null ? 128 : code));
});
`

// registryProxy is an HTTP CONNECT proxy on a unix socket that reaches one
// host and port, the registry's, and only at public addresses: an install
// reaches the registry and nothing else — not the host's loopback, not a
// private network, not another host a package names.
type registryProxy struct {
	host, port string
	ln         net.Listener
	log        *slog.Logger

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startRegistryProxy listens at sock for the registry's connections.
func startRegistryProxy(sock, registry string, log *slog.Logger) (*registryProxy, error) {
	u, err := url.Parse(registry)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("registry proxy: registry %q is not a URL", registry)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("registry proxy: registry %q: only an https registry is reached", registry)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("registry proxy: %w", err)
	}
	// The sandbox's user connects to it.
	if err := os.Chmod(sock, 0o777); err != nil {
		ln.Close()
		return nil, fmt.Errorf("registry proxy: %w", err)
	}
	p := &registryProxy{host: u.Hostname(), port: port, ln: ln, log: log, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Close stops the proxy and ends its connections.
func (p *registryProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *registryProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *registryProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *registryProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// handle answers one CONNECT: to the registry's host and port at a public
// address it is tunnelled, anything else is refused with 403.
func (p *registryProxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	host, port, err := net.SplitHostPort(req.Host)
	if req.Method != http.MethodConnect || err != nil || !strings.EqualFold(host, p.host) || port != p.port {
		p.refuse(c, fmt.Sprintf("only %s is reached, not %s %s", net.JoinHostPort(p.host, p.port), req.Method, req.Host))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := p.dial(ctx)
	if err != nil {
		p.refuse(c, err.Error())
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); up.Close(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); c.Close(); done <- struct{}{} }()
	<-done
	<-done
}

// dial connects to the registry at one of its public addresses.
func (p *registryProxy) dial(ctx context.Context) (net.Conn, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", p.host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", p.host, err)
	}
	var errs []error
	for _, a := range addrs {
		if !publicAddr(a) {
			errs = append(errs, fmt.Errorf("%s resolves to %s, not a public address", p.host, a))
			continue
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.Unmap().String(), p.port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s has no address", p.host)
	}
	return nil, errors.Join(errs...)
}

func (p *registryProxy) refuse(c net.Conn, why string) {
	p.log.Warn("registry proxy refused a connection", slog.String("why", why))
	_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"+why+"\n")
}

// nonPublic are ranges netip does not name that are not the internet's.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: an IPv4 address inside
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// publicAddr reports whether an address is on the internet: not loopback,
// link-local, private, multicast or reserved.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// proxyDir makes a directory for one install's proxy socket.
func proxyDir(runDir string) (string, error) {
	dir, err := os.MkdirTemp(runDir, "registry-")
	if err != nil {
		return "", fmt.Errorf("registry proxy: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("registry proxy: %w", err)
	}
	return dir, nil
}
