package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/metrics"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
)

const edgeSecret = "edge-test-secret-0123456789"

// edge is serve's HTTP server, as serve builds it, on a local port.
type edge struct {
	addr     string
	verifier *auth.Verifier
	pool     *pgxpool.Pool
}

// startEdge serves httpHandler through newHTTPServer with cfg (JWT_SECRET
// set) on a fresh database and local store.
func startEdge(t *testing.T, cfg config) *edge {
	t.Helper()
	pool := dbtest.New(t)
	st, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.JWTSecret = edgeSecret
	ctx, cancel := context.WithCancel(context.Background())
	h, err := httpHandler(ctx, cfg, slog.New(slog.DiscardHandler), pool, st, nil, m, "on", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(ctx, cfg, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { cancel(); _ = srv.Close(); <-done })
	v, err := auth.NewVerifier(edgeSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &edge{addr: ln.Addr().String(), verifier: v, pool: pool}
}

func (e *edge) token(t *testing.T, projects ...uuid.UUID) string {
	t.Helper()
	c := auth.Claims{Role: "authenticated", RegisteredClaims: jwt.RegisteredClaims{
		Subject: "edge", IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}
	for _, p := range projects {
		c.Projects = append(c.Projects, p.String())
	}
	s, err := e.verifier.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dial opens a raw connection whose reads give up after d.
func (e *edge) dial(t *testing.T, d time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer reports whether the server closed c (EOF or reset) before
// c's read deadline, draining whatever it answered first.
func closedByServer(c net.Conn) (bool, error) {
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, err
	}
	return true, err
}

// TestSlowBodyUnauthenticated: a POST without a token that announces a
// 100 kB body and sends one byte is answered 401 at once, and its
// connection closed, without reading the body.
func TestSlowBodyUnauthenticated(t *testing.T) {
	t.Parallel()
	e := startEdge(t, config{HTTPReadTimeout: time.Minute, HTTPIdleTimeout: time.Minute})
	c := e.dial(t, 5*time.Second)
	fmt.Fprintf(c, "POST /v1/projects/%s/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", uuid.New())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to an unauthenticated slow POST within 5 s: %v", err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("answer: %d, close %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
	// The server closes it too, without waiting for the body (its read
	// timeout is a minute).
	if closed, err := closedByServer(c); !closed {
		t.Errorf("the refused connection stayed open: %v", err)
	}
}

// TestSlowBodyTimesOut: an authenticated POST whose body trickles in is cut
// at HTTP_READ_TIMEOUT: the connection is closed.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	e := startEdge(t, config{HTTPReadTimeout: time.Second, HTTPIdleTimeout: time.Minute})
	project := uuid.New()
	c := e.dial(t, 10*time.Second)
	fmt.Fprintf(c, "POST /v1/projects/%s/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", project, e.token(t, project))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte every 200 ms: never idle, never done
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	start := time.Now()
	if closed, err := closedByServer(c); !closed {
		t.Fatalf("a trickling body held its connection for 10 s (read timeout 1 s): %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("connection closed after %s, read timeout 1 s", took)
	}
}

// TestIdleConnectionClosed: a keep-alive connection with no request is
// closed after HTTP_IDLE_TIMEOUT.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	e := startEdge(t, config{HTTPReadTimeout: time.Second, HTTPIdleTimeout: time.Second})
	c := e.dial(t, 10*time.Second)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed a keep-alive connection after one request")
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("an idle keep-alive connection stayed open for 10 s (idle timeout 1 s)")
		}
	}
}

// TestStreamOutlivesReadTimeout: an event stream is exempt from the read
// (and write) timeouts: it keeps sending heartbeats long after them.
func TestStreamOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	e := startEdge(t, config{HTTPReadTimeout: 300 * time.Millisecond, HTTPIdleTimeout: 300 * time.Millisecond, HTTPWriteTimeout: 300 * time.Millisecond,
		SSEHeartbeat: 100 * time.Millisecond})
	project := uuid.New()
	c := e.dial(t, 10*time.Second)
	fmt.Fprintf(c, "GET /v1/projects/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", project, e.token(t, project))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	buf := make([]byte, 64)
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatalf("stream ended after %s (read timeout 300 ms): %v", time.Since(start), err)
		}
	}
	if !strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
}
