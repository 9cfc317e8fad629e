package storage_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/s3test"
)

// gate is a TCP relay to the test's MinIO that can be taken down (its
// port refuses connections, open ones are cut) and brought back on the
// same address: the store's view of an S3 outage.
type gate struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	g := &gate{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	g.serve(ln)
	t.Cleanup(func() { g.down(); g.wg.Wait() })
	return g
}

func (g *gate) serve(ln net.Listener) {
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.wg.Go(func() { g.relay(c) })
		}
	})
}

func (g *gate) relay(c net.Conn) {
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	g.mu.Lock()
	g.conns[c], g.conns[up] = true, true
	g.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
	wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
	wg.Wait()
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}

// down closes the port and cuts every open connection.
func (g *gate) down() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
	}
}

// up listens on the same address again.
func (g *gate) up() {
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Error(err)
		return
	}
	g.serve(ln)
}

// TestOutage: a store that cannot be reached is retried inside the call
// for S3Config.RetryFor. An outage shorter than that is never seen by
// the caller; a longer one is storage.ErrUnavailable once the bound is
// spent; an answer of the store (a missing file) is not retried.
func TestOutage(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, retryFor time.Duration) (*storage.S3, *gate) {
		t.Helper()
		cfg := s3test.Config(t)
		g := newGate(t, cfg.Endpoint)
		cfg.Endpoint, cfg.RetryFor = g.addr, retryFor
		s, err := storage.NewS3(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, g
	}
	const project = "6f1c1d5e-0000-4000-8000-000000000001"

	t.Run("ShorterThanTheRetriesIsRiddenOut", func(t *testing.T) {
		t.Parallel()
		s, g := setup(t, 20*time.Second)
		g.down()
		const outage = 1500 * time.Millisecond
		back := time.AfterFunc(outage, g.up)
		defer back.Stop()
		start := time.Now()
		if _, err := s.Write(t.Context(), project, "a.txt", []byte("a")); err != nil {
			t.Fatalf("write through a %s outage = %v, want it ridden out", outage, err)
		}
		if took := time.Since(start); took < outage {
			t.Errorf("the write returned after %s, before the store was back (%s)", took, outage)
		}
		if got, _, err := s.Read(t.Context(), project, "a.txt"); err != nil || string(got) != "a" {
			t.Errorf("read = %q, %v", got, err)
		}
	})

	t.Run("LongerThanTheRetriesIsErrUnavailable", func(t *testing.T) {
		t.Parallel()
		const retryFor = 500 * time.Millisecond
		s, g := setup(t, retryFor)
		g.down()
		calls := map[string]func() error{
			"read":   func() error { _, _, err := s.Read(t.Context(), project, "a.txt"); return err },
			"stat":   func() error { _, err := s.Stat(t.Context(), project, "a.txt"); return err },
			"list":   func() error { _, err := s.List(t.Context(), project, ""); return err },
			"write":  func() error { _, err := s.Write(t.Context(), project, "a.txt", []byte("a")); return err },
			"create": func() error { _, err := s.WriteIf(t.Context(), project, "a.txt", []byte("a"), ""); return err },
			"delete": func() error { return s.DeleteIf(t.Context(), project, "a.txt", "0123456789abcdef0123456789abcdef") },
			"move":   func() error { return s.Move(t.Context(), project, "a.txt", "b.txt", false) },
		}
		for name, call := range calls {
			start := time.Now()
			err := call()
			took := time.Since(start)
			if !errors.Is(err, storage.ErrUnavailable) {
				t.Errorf("%s with the store down = %v, want ErrUnavailable", name, err)
			}
			if took < retryFor/2 || took > retryFor+5*time.Second {
				t.Errorf("%s gave up after %s, want about %s", name, took, retryFor)
			}
		}
	})

	t.Run("AnAnswerIsNotRetried", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, 20*time.Second)
		start := time.Now()
		_, _, err := s.Read(t.Context(), project, "missing.txt")
		if !errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("read of a missing file = %v, want ErrNotFound", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a missing file took %s: retried", took)
		}
	})
}
