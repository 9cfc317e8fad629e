package corpus_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/corpus"
)

var update = flag.Bool("corpus.update", false, "rebuild manifest.json from the registries")

// specs are the releases the corpus is taken from: popular Go modules and
// npm packages (JavaScript, and TypeScript sources where a package ships
// them), one minor or patch release apart.
var specs = []corpus.Spec{
	{Ecosystem: corpus.Go, Name: "github.com/spf13/cobra", From: "v1.7.0", To: "v1.8.0"},
	{Ecosystem: corpus.Go, Name: "github.com/gin-gonic/gin", From: "v1.9.1", To: "v1.10.0"},
	{Ecosystem: corpus.Go, Name: "github.com/stretchr/testify", From: "v1.8.4", To: "v1.9.0"},
	{Ecosystem: corpus.Go, Name: "github.com/sirupsen/logrus", From: "v1.9.0", To: "v1.9.3"},
	{Ecosystem: corpus.Go, Name: "github.com/go-chi/chi/v5", From: "v5.0.10", To: "v5.0.12"},
	{Ecosystem: corpus.Go, Name: "golang.org/x/sync", From: "v0.5.0", To: "v0.7.0"},
	{Ecosystem: corpus.NPM, Name: "axios", From: "1.6.0", To: "1.7.0"},
	{Ecosystem: corpus.NPM, Name: "commander", From: "11.1.0", To: "12.0.0"},
	{Ecosystem: corpus.NPM, Name: "@tanstack/query-core", From: "5.0.0", To: "5.17.0"},
	{Ecosystem: corpus.NPM, Name: "@trpc/server", From: "10.45.0", To: "10.45.2"},
	{Ecosystem: corpus.NPM, Name: "preact", From: "10.19.3", To: "10.20.0"},
	{Ecosystem: corpus.NPM, Name: "express", From: "4.18.2", To: "4.19.2"},
	// tslib ships its files with CRLF line endings.
	{Ecosystem: corpus.NPM, Name: "tslib", From: "2.6.2", To: "2.7.0"},
}

// TestUpdateManifest rebuilds manifest.json (go test -run UpdateManifest
// -corpus.update): the changed code files of each spec, with checksums.
func TestUpdateManifest(t *testing.T) {
	if !*update {
		t.Skip("rebuilds manifest.json with -corpus.update")
	}
	cache, err := corpus.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	m, err := corpus.Build(ctx, specs, cache, corpus.Selection{PerPackage: 20, MaxBytes: 150 << 10, MaxChanged: 400, MaxLineBytes: 800})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("manifest.json", append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Packages {
		t.Logf("%s: %d files", p.Spec, len(p.Files))
	}
}

// score counts byte-exact results of one form.
type score struct{ exact, total int }

func (s score) String() string {
	return fmt.Sprintf("%d/%d (%.1f%%)", s.exact, s.total, 100*float64(s.exact)/float64(max(s.total, 1)))
}

// TestCorpusThroughTheTools applies every edit of the corpus in every form
// through apply_patch, as the model calls it, and requires each result to
// be byte for byte the released file.
func TestCorpusThroughTheTools(t *testing.T) {
	t.Parallel()
	edits := corpus.Open(t)
	checkComposition(t, edits)
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.ForTaskType("build")
	if err != nil {
		t.Fatal(err)
	}
	scores := map[string]*score{}
	byLang := map[string]*score{}
	skipped := map[string]int{}
	var failures []string
	for i, e := range edits {
		forms, skip := corpus.Forms(i, e)
		for name := range skip {
			skipped[name]++
		}
		for _, f := range forms {
			project := fmt.Sprintf("e%03d-%s", i, f.Name)
			if _, err := store.Write(t.Context(), project, e.Path, []byte(f.Base)); err != nil {
				t.Fatal(err)
			}
			args, _ := json.Marshal(map[string]string{"patch": f.Patch})
			r := reg.Call(t.Context(), tools.Env{Store: store, ProjectID: project}, "apply_patch", string(args))
			got, _, err := store.Read(t.Context(), project, e.Path)
			if err != nil {
				t.Fatal(err)
			}
			ok := r.Success && string(got) == f.Want
			for _, k := range []string{f.Name, f.Name + "/" + e.Lang()} {
				m := scores
				if strings.Contains(k, "/") {
					m = byLang
				}
				if m[k] == nil {
					m[k] = &score{}
				}
				m[k].total++
				if ok {
					m[k].exact++
				}
			}
			if !ok {
				why := "not byte-exact"
				if !r.Success {
					why = r.Summary
				}
				failures = append(failures, fmt.Sprintf("%s %s %s [%s]: %s", e.Spec, e.Path, f.Name, e.Lang(), firstLine(why)))
			}
		}
	}
	for _, name := range corpus.FormNames {
		var langs []string
		for k, s := range byLang {
			if strings.HasPrefix(k, name+"/") {
				langs = append(langs, fmt.Sprintf("%s %s", strings.TrimPrefix(k, name+"/"), s))
			}
		}
		sort.Strings(langs)
		t.Logf("%-8s %s  (%s)%s", name, scores[name], strings.Join(langs, ", "), skippedNote(skipped[name]))
	}
	for _, f := range failures[:min(len(failures), 20)] {
		t.Error(f)
	}
	if len(failures) > 20 {
		t.Errorf("… and %d more", len(failures)-20)
	}
}

func skippedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d edit(s) not expressible in this form", n)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// checkComposition holds the corpus to its brief: at least 150 edits, a
// third of them JavaScript or TypeScript.
func checkComposition(t *testing.T, edits []corpus.Edit) {
	t.Helper()
	js := 0
	crlf := 0
	for _, e := range edits {
		if e.Lang() != "go" {
			js++
		}
		if strings.Contains(e.Old, "\r\n") {
			crlf++
		}
	}
	t.Logf("corpus: %d edits, %d JS/TS, %d with CRLF in the release itself", len(edits), js, crlf)
	if len(edits) < 150 || 3*js < len(edits) {
		t.Errorf("corpus has %d edits, %d of them JS/TS: want at least 150, a third JS/TS", len(edits), js)
	}
}
