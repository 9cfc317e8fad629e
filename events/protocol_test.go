package events_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentworker/agentworker/events/internal/schemagen"
)

//go:generate go test -run TestProtocolFiles -update .

var update = flag.Bool("update", false, "rewrite docs/events.schema.json and docs/events.d.ts")

// TestProtocolFiles checks that the published protocol files are what the
// Go types generate; -update rewrites them.
func TestProtocolFiles(t *testing.T) {
	t.Parallel()
	schema, ts, err := schemagen.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"events.schema.json": schema, "events.d.ts": ts} {
		path := filepath.Join("..", "docs", name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go generate ./events)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date with the Go types: run go generate ./events", path)
		}
	}
}
