package s3test

import (
	"context"
	"sync"

	"github.com/agentworker/agentworker/internal/devenv/localminio"
	"github.com/agentworker/agentworker/storage"
)

// shared is the MinIO server of this test process, started by the first test
// that needs one. It is the package's only mutable state: a server takes
// seconds to start, so the tests of a process share it, the way database/sql
// shares its driver registry, and the sync.Once inside makes that safe.
//
// It is never stopped: it dies with the test process (parent-death signal)
// and a later run removes its directory.
var shared server

type server struct {
	once sync.Once
	cfg  storage.S3Config
	err  error
}

// config starts the server on first use and returns its config, without a
// bucket. The error wraps localminio.ErrNotInstalled when there is no minio
// binary.
func (s *server) config() (storage.S3Config, error) {
	s.once.Do(func() {
		srv, err := localminio.Start(context.Background(), localminio.Config{})
		if err != nil {
			s.err = err
			return
		}
		s.cfg = srv.Config()
	})
	return s.cfg, s.err
}
