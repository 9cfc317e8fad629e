package s3test_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/goleak"

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

	var cfg storage.S3Config
	t.Run("WriteInFreshBucket", func(t *testing.T) {
		cfg = s3test.Config(t)
		if again := s3test.Config(t); again.Bucket == cfg.Bucket {
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
	exists, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil || exists {
		t.Errorf("BucketExists(%q) after cleanup = %t, %v; want false", cfg.Bucket, exists, err)
	}
}
