package storage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/s3test"
)

// requestLog passes requests on to S3 and records their methods.
type requestLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := l.sent
	l.sent = nil
	return sent
}

// countedS3 is a store on the test server whose requests go through a
// proxy that records them.
func countedS3(t *testing.T) (*storage.S3, *requestLog) {
	t.Helper()
	cfg := s3test.Config(t)
	target, err := url.Parse("http://" + cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	log := &requestLog{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.mu.Lock()
		log.sent = append(log.sent, r.Method)
		log.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.Endpoint = srv.Listener.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := storage.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	log.take() // the bucket's creation
	return s, log
}

// TestS3WriteIsOneRequest: a write is one PUT. Its info's time is when S3
// acknowledged it, by this process's clock (a PUT's answer carries no
// Last-Modified); Stat reports S3's own.
func TestS3WriteIsOneRequest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, log := countedS3(t)
	writes := []struct {
		name  string
		write func() (storage.FileInfo, error)
	}{
		{"Write", func() (storage.FileInfo, error) { return s.Write(ctx, "p", "a.txt", []byte("a")) }},
		{"WriteIfAbsent", func() (storage.FileInfo, error) { return s.WriteIf(ctx, "p", "b.txt", []byte("b"), "") }},
	}
	for _, w := range writes {
		before := time.Now()
		info, err := w.write()
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if sent := log.take(); len(sent) != 1 || sent[0] != http.MethodPut {
			t.Errorf("%s sent %v, want one PUT", w.name, sent)
		}
		if info.ModTime.Before(before) || info.ModTime.After(time.Now()) {
			t.Errorf("%s: time %v, want within the call (from %v)", w.name, info.ModTime, before)
		}
		stat, err := s.Stat(ctx, "p", info.Path)
		if err != nil {
			t.Fatal(err)
		}
		if d := stat.ModTime.Sub(info.ModTime); d < -2*time.Second || d > 2*time.Second || stat.ETag != info.ETag {
			t.Errorf("%s: Stat says %v (ETag %s), the write said %v (ETag %s)", w.name, stat.ModTime, stat.ETag, info.ModTime, info.ETag)
		}
		log.take()
	}
	// And the conditional write over the version just written.
	info, err := s.Write(ctx, "p", "c.txt", []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	if _, err := s.WriteIf(ctx, "p", "c.txt", []byte("c2"), info.ETag); err != nil {
		t.Fatal(err)
	}
	if sent := log.take(); len(sent) != 1 || sent[0] != http.MethodPut {
		t.Errorf("WriteIf over a version sent %v, want one PUT", sent)
	}
}
