package storage_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
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

// TestReadLimit: a Read bounded by WithReadLimit returns a file at the
// bound and refuses a larger one with a *TooLargeError naming its size, in
// the one request of a read (S3: one GET, its body left unread), in the S3
// and the local store alike; an unbounded Read is unchanged.
func TestReadLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3, log := countedS3(t)
	local, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]storage.Store{"s3": s3, "local": local} {
		storagetest.Write(t, s, "p", "at.txt", "12345")
		storagetest.Write(t, s, "p", "over.txt", "123456")
		log.take()
		bounded := storage.WithReadLimit(ctx, 5)
		if c, _, err := s.Read(bounded, "p", "at.txt"); err != nil || string(c) != "12345" {
			t.Errorf("%s: read of a file at the bound = %q, %v", name, c, err)
		}
		c, _, err := s.Read(bounded, "p", "over.txt")
		var tl *storage.TooLargeError
		if !errors.As(err, &tl) || !errors.Is(err, storage.ErrTooLarge) || tl.Size != 6 || tl.Max != 5 || tl.Path != "over.txt" || c != nil {
			t.Errorf("%s: read of a file over the bound = %q, %v; want a *TooLargeError of over.txt, 6 bytes, cap 5", name, c, err)
		}
		if err == nil || err.Error() != "over.txt: 6 bytes, over the 5-byte cap: file too large" {
			t.Errorf("%s: the refusal says %v", name, err)
		}
		if c, _, err := s.Read(ctx, "p", "over.txt"); err != nil || string(c) != "123456" {
			t.Errorf("%s: unbounded read = %q, %v", name, c, err)
		}
		if name == "s3" {
			if sent := log.take(); len(sent) != 3 || sent[0] != http.MethodGet || sent[1] != http.MethodGet || sent[2] != http.MethodGet {
				t.Errorf("three reads sent %v, want a GET each", sent)
			}
		}
	}
}
