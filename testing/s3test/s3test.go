// Package s3test gives tests a real S3 server: the one named by
// TEST_S3_ENDPOINT, or else a MinIO server it starts from the minio binary,
// once per test process. Each call to Config or NewStore gets its own fresh
// bucket, emptied and removed when the test ends.
//
// Where the server comes from, in order:
//
//  1. TEST_S3_ENDPOINT (host:port), with TEST_S3_ACCESS_KEY and
//     TEST_S3_SECRET_KEY (both default to "minioadmin") and TEST_S3_USE_SSL
//     (defaults to false).
//  2. The minio binary at MINIO_BIN, on PATH, or in $GOBIN, $GOPATH/bin or
//     $HOME/go/bin, started with internal/devenv/localminio: "minio server" on
//     127.0.0.1 with random credentials and a data directory under
//     os.TempDir.
//
// When neither is available the test is skipped with one line naming
// ./scripts/test, which installs the binary; with CI=true it fails instead
// (package prereq).
//
// The started server is killed with the test process (Linux parent-death
// signal). Its data directories, named agentworker-minio-*, are removed by
// a later start once their server is gone.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/internal/devenv/localminio"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/prereq"
)

// Config returns the config of a fresh bucket on the test server. The bucket
// does not exist yet (storage.NewS3 creates it); whatever exists under that
// name when the test ends is emptied and removed.
func Config(t testing.TB) storage.S3Config {
	t.Helper()
	cfg, err := serverConfig()
	if errors.Is(err, localminio.ErrNotInstalled) {
		prereq.Missing(t, "MinIO", fmt.Errorf("%w, and TEST_S3_ENDPOINT is not set", err))
	}
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	cfg.Bucket = "s3test-" + randomHex(12)
	t.Cleanup(func() {
		if err := removeBucket(cfg); err != nil {
			t.Errorf("s3test: %v", err)
		}
	})
	return cfg
}

// NewStore returns a store on a fresh bucket of the test server, closed when
// the test ends.
func NewStore(t testing.TB) *storage.S3 {
	t.Helper()
	cfg := Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := storage.NewS3(ctx, cfg)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// LeakOption is the goleak option for packages that check for goroutine
// leaks in TestMain: it ignores the goroutine that waits on the shared
// MinIO server, which lives as long as the test process. (It is a child
// process's waiter, so it ignores any other child still running at the end
// too: the servers tests start are stopped in their cleanup.)
//
//	goleak.VerifyTestMain(m, s3test.LeakOption())
func LeakOption() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/agentworker/agentworker/internal/devenv/supervise.(*Child).run")
}

// serverConfig returns the endpoint and credentials of the test server,
// without a bucket. The error wraps localminio.ErrNotInstalled when there is
// neither TEST_S3_ENDPOINT nor a minio binary.
func serverConfig() (storage.S3Config, error) {
	if endpoint := os.Getenv("TEST_S3_ENDPOINT"); endpoint != "" {
		cfg := storage.S3Config{
			Endpoint:  endpoint,
			AccessKey: envOr("TEST_S3_ACCESS_KEY", "minioadmin"),
			SecretKey: envOr("TEST_S3_SECRET_KEY", "minioadmin"),
		}
		if v := os.Getenv("TEST_S3_USE_SSL"); v != "" {
			ssl, err := strconv.ParseBool(v)
			if err != nil {
				return storage.S3Config{}, fmt.Errorf("parse TEST_S3_USE_SSL %q: %w", v, err)
			}
			cfg.UseSSL = ssl
		}
		return cfg, nil
	}
	return shared.config()
}

// removeBucket empties and removes the bucket of cfg if it exists.
func removeBucket(cfg storage.S3Config) error { return removeBucketVia(cfg, nil) }

// removeBucketVia is removeBucket with its transport wrapped by wrap, when
// not nil. The objects go in requests of up to a thousand (S3's
// DeleteObjects): a bench fills its bucket with thousands, and one request
// an object outlasted the deadline on a loaded run.
func removeBucketVia(cfg storage.S3Config, wrap func(http.RoundTripper) http.RoundTripper) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	transport, err := minio.DefaultTransport(cfg.UseSSL)
	if err != nil {
		return fmt.Errorf("remove bucket %q: %w", cfg.Bucket, err)
	}
	defer transport.CloseIdleConnections()
	var rt http.RoundTripper = transport
	if wrap != nil {
		rt = wrap(transport)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.UseSSL,
		Transport: rt,
	})
	if err != nil {
		return fmt.Errorf("remove bucket %q: %w", cfg.Bucket, err)
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil || !ok {
		if err != nil {
			return fmt.Errorf("remove bucket %q: %w", cfg.Bucket, err)
		}
		return nil
	}
	var listErr error
	objects := func(yield func(minio.ObjectInfo) bool) {
		for oi := range client.ListObjectsIter(ctx, cfg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if oi.Err != nil {
				listErr = oi.Err
				return
			}
			if !yield(oi) {
				return
			}
		}
	}
	removed, err := client.RemoveObjectsWithIter(ctx, cfg.Bucket, objects, minio.RemoveObjectsOptions{})
	if err != nil {
		return fmt.Errorf("remove bucket %q: remove objects: %w", cfg.Bucket, err)
	}
	for r := range removed {
		if r.Err != nil {
			return fmt.Errorf("remove bucket %q: remove object %q: %w", cfg.Bucket, r.ObjectName, r.Err)
		}
	}
	if listErr != nil {
		return fmt.Errorf("remove bucket %q: list: %w", cfg.Bucket, listErr)
	}
	if err := client.RemoveBucket(ctx, cfg.Bucket); err != nil {
		return fmt.Errorf("remove bucket %q: %w", cfg.Bucket, err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
