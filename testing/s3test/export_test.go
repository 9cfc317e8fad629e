package s3test

import (
	"net/http"

	"github.com/agentworker/agentworker/storage"
)

// RemoveBucket is the cleanup's removal of cfg's bucket, its requests sent
// through wrap's transport.
func RemoveBucket(cfg storage.S3Config, wrap func(http.RoundTripper) http.RoundTripper) error {
	return removeBucketVia(cfg, wrap)
}
