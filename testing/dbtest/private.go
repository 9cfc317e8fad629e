package dbtest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/agentworker/agentworker/testing/prereq"
)

// PrivateCluster starts a PostgreSQL cluster of the test's own, for what a
// shared server cannot give: a cluster-wide count nobody else moves, roles
// that do not exist yet, a server to restart. It is stopped and removed in
// t.Cleanup. Without the server binaries the test is skipped, unless
// CI=true.
func PrivateCluster(t testing.TB) *localpg.Cluster {
	t.Helper()
	c, err := localpg.Start(t.Context(), localpg.Config{})
	if errors.Is(err, localpg.ErrNotInstalled) {
		prereq.MissingFromMachine(t, "the PostgreSQL server (initdb, postgres)", "install the postgresql package", err)
	}
	if err != nil {
		t.Fatalf("start a private cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop the private cluster: %v", err)
		}
	})
	return c
}
