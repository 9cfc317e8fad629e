// Package jaegertest gives a test a real OTLP receiver: a private Jaeger
// (internal/devenv/localjaeger) from the jaeger binary at JAEGER_BIN, on
// PATH, or in $GOBIN, $GOPATH/bin or $HOME/go/bin, stopped when the test
// ends. Without the binary the test is skipped with one line naming
// ./scripts/test, which builds it; with CI=true it fails instead (package
// prereq).
package jaegertest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentworker/agentworker/internal/devenv/localjaeger"
	"github.com/agentworker/agentworker/testing/prereq"
)

// Start starts a Jaeger for t. Its output is logged when t failed.
func Start(t testing.TB) *localjaeger.Server {
	t.Helper()
	bin, err := localjaeger.FindBinary()
	if errors.Is(err, localjaeger.ErrNotInstalled) {
		prereq.Missing(t, "jaeger", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	j, err := localjaeger.Start(t.Context(), bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jaeger output:\n%s", j.Log())
		}
		_ = j.Stop(context.Background())
	})
	return j
}
