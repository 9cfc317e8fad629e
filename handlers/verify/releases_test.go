package verify_test

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/corpus"
)

// TestReleasesAsChangeSets takes the npm packages of the edit corpus as
// real multi-file projects: the whole release before, the next release
// after. The release introduces no problem the checks can see; one broken
// import added to it is caught; and the release's files alone, in a
// project without the rest of the package, still pass: their imports of
// files that are not there were broken before the change too.
func TestReleasesAsChangeSets(t *testing.T) {
	t.Parallel()
	m, err := corpus.Committed()
	if err != nil {
		t.Fatal(err)
	}
	corpus.Open(t) // skips without sources
	cache, err := corpus.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range m.Packages {
		if pkg.Ecosystem != corpus.NPM {
			continue
		}
		t.Run(strings.ReplaceAll(pkg.Name, "/", "_"), func(t *testing.T) {
			t.Parallel()
			old, err := corpus.Files(t.Context(), cache, pkg.Spec, pkg.From)
			if err != nil {
				t.Fatal(err)
			}
			nw, err := corpus.Files(t.Context(), cache, pkg.Spec, pkg.To)
			if err != nil {
				t.Fatal(err)
			}
			var changed []verify.Change
			var removed []string
			for p, c := range nw {
				if o, ok := old[p]; !ok || o != c {
					changed = append(changed, verify.Change{Path: p})
				}
			}
			for p := range old {
				if _, ok := nw[p]; !ok {
					removed = append(removed, p)
				}
			}
			sort.Slice(changed, func(i, j int) bool { return changed[i].Path < changed[j].Path })
			before, after := storeOf(t, old), storeOf(t, nw)
			rep, err := verify.CheckChange(t.Context(), before, after, "p", changed, removed)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("release %s: %d changed, %d removed; checked %d, introduced %d, pre-existing %d, unchecked %d",
				pkg.Spec, len(changed), len(removed), len(rep.Checked), len(rep.Problems), len(rep.Preexisting), len(rep.Unchecked))
			for _, p := range rep.Problems {
				if !known(pkg.Name, p) {
					t.Errorf("the release introduces %s", p)
				}
			}

			// One broken import in a changed code file is caught.
			target := ""
			for _, c := range changed {
				if strings.HasSuffix(c.Path, ".js") || strings.HasSuffix(c.Path, ".ts") && !strings.HasSuffix(c.Path, ".d.ts") {
					target = c.Path
					break
				}
			}
			if target == "" {
				return
			}
			broken := map[string]string{}
			for p, c := range nw {
				broken[p] = c
			}
			broken[target] = "import { gone } from './no-such-module.js';\n" + nw[target]
			rep, err = verify.CheckChange(t.Context(), before, storeOf(t, broken), "p", changed, removed)
			if err != nil {
				t.Fatal(err)
			}
			caught := 0
			for _, p := range rep.Problems {
				switch {
				case strings.Contains(p.Message, "no-such-module"):
					caught++
				case !known(pkg.Name, p):
					t.Errorf("broken import in %s: also %s", target, p)
				}
			}
			if caught != 1 {
				t.Errorf("broken import in %s not caught\n%s", target, rep)
			}

			// The corpus's files alone: the project lacks most of what they
			// import, before and after alike.
			partialOld, partialNew := map[string]string{"package.json": old["package.json"]}, map[string]string{"package.json": nw["package.json"]}
			var partial []verify.Change
			for _, f := range pkg.Files {
				partialOld[f.Path], partialNew[f.Path] = old[f.Path], nw[f.Path]
				partial = append(partial, verify.Change{Path: f.Path})
			}
			rep, err = verify.CheckChange(t.Context(), storeOf(t, partialOld), storeOf(t, partialNew), "p", partial, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("release files alone: checked %d, introduced %d, pre-existing %d", len(rep.Checked), len(rep.Problems), len(rep.Preexisting))
			for _, p := range rep.Problems {
				// A release file that imports a file the release added, which
				// the partial project lacks, is a true finding; nothing else.
				if !addedBy(nw, old, resolveRel(p)) && !known(pkg.Name, p) {
					t.Errorf("partial project: %s", p)
				}
			}
		})
	}
}

// knownFindings are true problems of the published releases: test files
// importing tools their package.json does not declare (the monorepo root
// does), and a require of a file the release does not ship.
var knownFindings = map[string][]string{
	"@tanstack/query-core": {`bare import "vitest"`, `bare import "@testing-library/react"`},
	"@trpc/server":         {`import "../../../dist/adapters/node-http/_export" does not resolve`},
}

func known(pkg string, p verify.Problem) bool {
	for _, k := range knownFindings[pkg] {
		if strings.Contains(p.Message, k) {
			return true
		}
	}
	return false
}

// addedBy reports whether a file of the new release that the old one
// lacks has this path, with any extension (a ".js" import of a ".d.ts").
func addedBy(nw, old map[string]string, file string) bool {
	if file == "" {
		return false
	}
	stem := strings.TrimSuffix(file, path.Ext(file))
	for p := range nw {
		if _, before := old[p]; !before && (p == file || strings.HasPrefix(p, stem+".")) {
			return true
		}
	}
	return false
}

// resolveRel guesses the file an unresolved relative import named, for
// telling a release's new files from false findings.
func resolveRel(p verify.Problem) string {
	var spec string
	if _, err := fmt.Sscanf(p.Message, "import %q", &spec); err != nil || !strings.HasPrefix(spec, ".") {
		return ""
	}
	return strings.TrimPrefix(pathJoin(p.Path, spec), "./")
}

func pathJoin(file, spec string) string {
	dir := file[:strings.LastIndex(file, "/")+1]
	parts := strings.Split(dir+spec, "/")
	var out []string
	for _, s := range parts {
		switch s {
		case ".", "":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}

func storeOf(t *testing.T, files map[string]string) *storage.Local {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if _, err := store.Write(t.Context(), "p", p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// listings is a project store that counts how often it is listed.
type listings struct {
	*storage.Local
	n atomic.Int32
}

func (l *listings) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	l.n.Add(1)
	return l.Local.List(ctx, projectID, dir)
}

// A change whose files check clean never lists the project as it was
// before: the before state only tells a new problem from an old one. A
// change with a problem lists it once, however many files it checks.
func TestCheckChangeListsTheBeforeStateOnlyForFindings(t *testing.T) {
	t.Parallel()
	base := map[string]string{"src/a.ts": "export const a = 1\n", "src/b.ts": "export const b = 2\n"}
	tests := []struct {
		name       string
		a, b       string
		wantListed int32
		wantPassed bool
	}{
		{"Clean", "import { b } from './b'\nexport const a = b\n", "export const b = 3\n", 0, true},
		{"TwoBroken", "import { x } from './missing'\nexport const a = x\n", "import { y } from './gone'\nexport const b = y\n", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := &listings{Local: storeOf(t, base)}
			after := storeOf(t, map[string]string{"src/a.ts": tt.a, "src/b.ts": tt.b})
			rep, err := verify.CheckChange(t.Context(), before, after, "p", []verify.Change{{Path: "src/a.ts"}, {Path: "src/b.ts"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Passed() != tt.wantPassed {
				t.Fatalf("passed = %v, want %v\n%s", rep.Passed(), tt.wantPassed, rep)
			}
			if got := before.n.Load(); got != tt.wantListed {
				t.Errorf("the before state was listed %d times, want %d", got, tt.wantListed)
			}
		})
	}
}
