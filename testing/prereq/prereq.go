// Package prereq decides what a test does when a tool it needs is missing
// (the minio binary, Chromium, …): every such tool is installed by the
// README's test command, ./scripts/test, so a plain `go test ./...` skips
// the test with one line naming that command, and CI (CI=true), where the
// command has installed it, fails instead: a tool missing there is a broken
// setup, never a silent skip.
package prereq

import (
	"fmt"
	"os"
	"testing"
)

// Command is the README's test command, which installs every tool a test
// needs.
const Command = "./scripts/test"

// Missing ends the test because tool is not installed; err says where it
// was looked for. It skips, or fails when CI=true.
func Missing(t testing.TB, tool string, err error) {
	t.Helper()
	missing(t, tool, "run "+Command+", which installs it", err)
}

// MissingFromMachine is Missing for a tool the test command does not
// install because the machine is expected to have it (the PostgreSQL server
// binaries): install says how to get it.
func MissingFromMachine(t testing.TB, tool, install string, err error) {
	t.Helper()
	missing(t, tool, install, err)
}

func missing(t testing.TB, tool, install string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not installed (%v): %s", tool, err, install)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true, so not skipping", msg)
	}
	t.Skip(msg)
}
