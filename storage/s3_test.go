package storage_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestS3(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storage.Store {
		t.Helper()
		return s3test.NewStore(t)
	})
}

func TestNewS3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RequiresEndpointAndBucket", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []storage.S3Config{{Bucket: "b"}, {Endpoint: "localhost:9000"}} {
			if _, err := storage.NewS3(ctx, cfg); err == nil {
				t.Errorf("NewS3(%v) succeeded", cfg)
			}
		}
	})

	t.Run("CreatesBucketOnce", func(t *testing.T) {
		t.Parallel()
		cfg := s3test.Config(t)
		// Replicas starting together race to create the bucket.
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				s, err := storage.NewS3(ctx, cfg)
				if err == nil {
					err = s.Ping(ctx)
					_ = s.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		}
	})

	t.Run("WrongSecretNotInError", func(t *testing.T) {
		t.Parallel()
		cfg := s3test.Config(t)
		cfg.SecretKey = "wrong-secret-0123456789"
		s, err := storage.NewS3(ctx, cfg)
		if err == nil {
			_ = s.Close()
			t.Fatal("NewS3 with a wrong secret key succeeded")
		}
		if strings.Contains(err.Error(), cfg.SecretKey) {
			t.Errorf("error %q holds the secret key", err)
		}
	})
}

func TestS3Ping(t *testing.T) {
	t.Parallel()
	s := s3test.NewStore(t)
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestS3ConfigRedactsSecret(t *testing.T) {
	t.Parallel()
	cfg := storage.S3Config{Endpoint: "localhost:9000", AccessKey: "id", SecretKey: "s3cr3t-value", Bucket: "b"}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "s3", cfg)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "s3", cfg)
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%v", &cfg), logged.String()} {
		if strings.Contains(out, cfg.SecretKey) {
			t.Errorf("secret key in %q", out)
		}
	}
	if !strings.Contains(logged.String(), "localhost:9000") {
		t.Errorf("log %q lacks the endpoint", logged.String())
	}
}
