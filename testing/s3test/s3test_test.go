package s3test_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, s3test.LeakOption())
}

func TestNewStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := s3test.NewStore(t)

	want := []byte("hello\x00world")
	written, err := s.Write(ctx, "project", "dir/file.bin", want)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, info, err := s.Read(ctx, "project", "dir/file.bin")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !bytes.Equal(got, want) || info.ETag != written.ETag {
		t.Errorf("Read = %q, ETag %q; want %q, ETag %q", got, info.ETag, want, written.ETag)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Without a server this skips the whole test, before the subtest: the
	// checks after it need the server too.
	other := s3test.Config(t)
	var cfg storage.S3Config
	t.Run("WriteInFreshBucket", func(t *testing.T) {
		cfg = s3test.Config(t)
		if cfg.Bucket == other.Bucket {
			t.Errorf("two calls gave the same bucket %q", cfg.Bucket)
		}
		s, err := storage.NewS3(ctx, cfg)
		if err != nil {
			t.Fatalf("NewS3: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if _, err := s.Write(ctx, "project", "left-behind.txt", []byte("x")); err != nil {
			t.Fatalf("Write: %v", err)
		}
	})

	if t.Failed() {
		return
	}
	// The subtest's cleanup has emptied and removed its bucket.
	transport, err := minio.DefaultTransport(cfg.UseSSL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(transport.CloseIdleConnections)
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.UseSSL,
		Transport: transport,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A one-drive MinIO under a loaded CI run has answered HEAD with 200
	// right after the cleanup's DELETE succeeded (its bucket check needs no
	// drive to agree when the drive is marked offline), so the removal is
	// asked after until seen, within a bound a cleanup that did not remove
	// the bucket cannot pass. MinIO has kept answering 200 for over 10 s
	// while a loaded run kept its drive offline.
	deadline := time.Now().Add(60 * time.Second)
	for {
		exists, err := client.BucketExists(ctx, cfg.Bucket)
		if err == nil && !exists {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("BucketExists(%q) after cleanup = %t, %v; want false", cfg.Bucket, exists, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRemoveBucketInFewRequests: the cleanup removes a bucket holding more
// objects than one delete request takes in a few requests, not one an
// object (a bench's bucket of thousands outlasted the cleanup's deadline on a
// loaded CI run).
func TestRemoveBucketInFewRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := s3test.Config(t)
	s, err := storage.NewS3(ctx, cfg)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const objects = 1100
	var g errgroup.Group
	g.SetLimit(8)
	for i := range objects {
		g.Go(func() error {
			_, err := s.Write(ctx, fmt.Sprintf("p%d", i%7), fmt.Sprintf("f%04d.txt", i), []byte("x"))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("write %d objects: %v", objects, err)
	}
	var requests atomic.Int64
	err = s3test.RemoveBucket(cfg, func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return next.RoundTrip(r)
		})
	})
	if err != nil {
		t.Fatalf("remove the bucket of %d objects: %v", objects, err)
	}
	// A probe, the listing's pages (a thousand keys each), the deletes'
	// (a thousand each), the bucket.
	if n := requests.Load(); n > 10 {
		t.Errorf("removing a bucket of %d objects took %d requests, want at most 10", objects, n)
	}
	if _, err := s.Stat(ctx, "p0", "f0000.txt"); err == nil {
		t.Errorf("an object is left after the bucket was removed")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWithoutMinIO runs this package's tests in a child process that cannot
// find a minio binary, as on a fresh clone: they skip, each with one line
// naming ./scripts/test, and the run passes; with CI=true it fails.
func TestWithoutMinIO(t *testing.T) {
	if os.Getenv("S3TEST_CHILD") == "1" {
		t.Skip("already the child")
	}
	t.Parallel()
	for _, tc := range []struct {
		ci    string
		fails bool
	}{{"", false}, {"true", true}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Parallel()
			empty := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^(TestNewStore|TestConfig)$", "-test.v")
			cmd.Env = append(os.Environ(), "S3TEST_CHILD=1", "CI="+tc.ci, "TEST_S3_ENDPOINT=",
				"MINIO_BIN=", "PATH="+empty, "GOBIN=", "GOPATH="+empty, "HOME="+empty)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.fails {
				t.Fatalf("child run failed = %t (%v), want %t:\n%s", failed, err, tc.fails, out)
			}
			verdict := "--- SKIP: "
			if tc.fails {
				verdict = "--- FAIL: "
			}
			for _, test := range []string{"TestNewStore", "TestConfig"} {
				if !strings.Contains(string(out), verdict+test) {
					t.Errorf("%s did not report %q:\n%s", test, verdict, out)
				}
			}
			if n := strings.Count(string(out), "run ./scripts/test, which installs it"); n != 2 {
				t.Errorf("%d lines name ./scripts/test, want one per test:\n%s", n, out)
			}
			if strings.Contains(string(out), "Endpoint:") {
				t.Errorf("a test went on without a server:\n%s", out)
			}
		})
	}
}
