package corpus_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/testing/corpus"
)

var reference = flag.Bool("corpus.reference", false, "apply every form with GNU patch and git apply too, and print their scores (docs/edits.md)")

// TestReferenceTools measures what GNU patch and git apply make of the
// same forms, for docs/edits.md (go test -run ReferenceTools
// -corpus.reference -v), and holds the corpus's unified diffs to them.
// scripts/test runs it.
func TestReferenceTools(t *testing.T) {
	if !*reference {
		t.Skip("compares with GNU patch and git apply with -corpus.reference")
	}
	edits := corpus.Open(t)
	tools := []struct {
		name string
		args []string
	}{
		{"patch", []string{"patch", "-p1", "-s", "-f", "--no-backup-if-mismatch", "-r", "-", "-i"}},
		{"patch -l", []string{"patch", "-p1", "-s", "-f", "-l", "--no-backup-if-mismatch", "-r", "-", "-i"}},
		{"git apply", []string{"git", "apply", "-p1", "--whitespace=nowarn"}},
		{"git apply --ignore-whitespace", []string{"git", "apply", "-p1", "--whitespace=nowarn", "--ignore-whitespace"}},
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.args[0]); err != nil {
			t.Skipf("%s is not installed: apt-get install patch git", tool.args[0])
		}
	}
	scores := map[string]*score{}
	dir := t.TempDir()
	for i, e := range edits {
		forms, _ := corpus.Forms(i, e)
		for _, f := range forms {
			for _, tool := range tools {
				work := filepath.Join(dir, "w")
				if err := os.RemoveAll(work); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(work, filepath.FromSlash(e.Path))
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(f.Base), 0o644); err != nil {
					t.Fatal(err)
				}
				pf := filepath.Join(dir, "p.diff")
				if err := os.WriteFile(pf, []byte(f.Patch), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd := exec.CommandContext(t.Context(), tool.args[0], append(tool.args[1:], pf)...)
				cmd.Dir = work
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				got, _ := os.ReadFile(file)
				k := tool.name + "|" + f.Name
				if scores[k] == nil {
					scores[k] = &score{}
				}
				scores[k].total++
				if err == nil && string(got) == f.Want {
					scores[k].exact++
				}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| tool | %s |\n|---|%s\n", strings.Join(corpus.FormNames, " | "), strings.Repeat("---|", len(corpus.FormNames)))
	for _, tool := range tools {
		fmt.Fprintf(&b, "| %s |", tool.name)
		for _, f := range corpus.FormNames {
			fmt.Fprintf(&b, " %s |", scores[tool.name+"|"+f])
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
	// The corpus's unified diffs are what the reference appliers take
	// them to be: GNU patch and git apply each land every one byte-exact,
	// so a corpus edit whose diff and wanted result disagree fails here.
	for _, name := range []string{"patch", "git apply"} {
		if s := scores[name+"|"+corpus.Unified]; s == nil || s.exact != s.total || s.total == 0 {
			t.Errorf("%s applied the unified form %v, want every edit byte-exact", name, s)
		}
	}
}
