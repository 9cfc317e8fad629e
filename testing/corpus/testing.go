package corpus

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

//go:embed manifest.json
var manifestJSON []byte

// Committed returns the manifest kept in the repository.
func Committed() (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(manifestJSON, &m); err != nil {
		return m, err
	}
	return m, nil
}

// Open returns the committed corpus's edits for a test, fetching into the
// cache what it lacks. Without sources (no network, no cache) the test is
// skipped with one line; in CI, where the registries are reachable, that
// fails it instead.
func Open(tb testing.TB) []Edit {
	tb.Helper()
	m, err := Committed()
	if err != nil {
		tb.Fatalf("corpus manifest: %v", err)
	}
	cache, err := CacheDir()
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	edits, err := Load(ctx, m, cache)
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "" {
		tb.Skipf("corpus not cached and not fetchable (%s); run ./scripts/test with network access once", strings.ReplaceAll(err.Error(), "\n", " "))
	}
	if err != nil {
		tb.Fatalf("corpus: %v", err)
	}
	return edits
}
