package handlers_test

import (
	"path"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/corpus"
)

// TestCorpusSampleThroughTheWorker sends a sample of the edit corpus
// through the whole worker: one build task whose model applies real
// release edits with apply_patch, each in another of the five forms, then
// finishes. The project holds only the edited files and their packages'
// package.json, so the JavaScript files import much that is not there;
// those imports were broken before the build, so the static checks let it
// finish, and every file lands byte for byte.
func TestCorpusSampleThroughTheWorker(t *testing.T) {
	t.Parallel()
	edits := corpus.Open(t)
	cache, err := corpus.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		edit corpus.Edit
		form corpus.Form
	}
	var picked []sample
	files := map[string]string{}
	langs := map[string]int{}
	withPreexisting := 0
	for i, e := range edits {
		if len(picked) == 10 {
			break
		}
		if langs[e.Lang()] >= 4 || i%7 != 0 {
			continue
		}
		prefix := strings.NewReplacer("/", "_", "@", "").Replace(e.Spec.Name)
		e.Path = prefix + "/" + e.Path
		pkgJSON := ""
		if e.Spec.Ecosystem == corpus.NPM {
			release, err := corpus.Files(t.Context(), cache, e.Spec, e.Spec.From)
			if err != nil {
				t.Fatal(err)
			}
			pkgJSON = release["package.json"]
		}
		project := map[string]string{e.Path: e.Old}
		if pkgJSON != "" {
			project[prefix+"/package.json"] = pkgJSON
		}
		// A sample edit must be one a correct build finishes with: it may
		// sit next to broken imports, but not add one.
		rep := checkAlone(t, project, e)
		if !rep.Passed() {
			continue
		}
		if len(rep.Preexisting) > 0 {
			withPreexisting++
		}
		forms, _ := corpus.Forms(i, e)
		want := corpus.FormNames[len(picked)%len(corpus.FormNames)]
		for _, f := range forms {
			if f.Name == want {
				picked = append(picked, sample{e, f})
				langs[e.Lang()]++
				for p, c := range project {
					files[p] = c
				}
				files[e.Path] = f.Base
			}
		}
	}
	if len(picked) < 8 || withPreexisting == 0 {
		t.Fatalf("picked %d sample edits, %d next to broken imports: the corpus is too small", len(picked), withPreexisting)
	}
	var replies []scripted.Reply
	for _, s := range picked {
		replies = append(replies, call("apply_patch", m{"patch": s.form.Patch}))
	}
	replies = append(replies, call("finish", m{"summary": "applied the release edits"}))
	h := setup(t, replies, handlers.Config{MaxIterations: len(replies) + 5}, files)
	id := h.insert(t, "build", "apply the release edits", nil)
	_, task := h.wait(t, id)
	res := result(t, task)
	got := h.files(t)
	for _, s := range picked {
		if got[s.edit.Path] != s.form.Want {
			t.Errorf("%s (%s, %s form) is not the released file", s.edit.Path, s.edit.Spec, s.form.Name)
		}
	}
	if res.Checks == nil || !res.Checks.Passed() || len(res.Checks.Preexisting) == 0 {
		t.Errorf("checks = %+v, want passed with pre-existing problems reported", res.Checks)
	}
	t.Logf("%d edits (%v) through the worker, byte-exact; the checks found %d pre-existing problem(s), none introduced",
		len(picked), langs, len(res.Checks.Preexisting))
}

// checkAlone runs the static checks of one edit in a project of its own.
func checkAlone(t *testing.T, project map[string]string, e corpus.Edit) verify.Report {
	t.Helper()
	if path.Ext(e.Path) == ".go" {
		return verify.Report{}
	}
	before, after := localStore(t, project), localStore(t, project)
	if _, err := after.Write(t.Context(), "p", e.Path, []byte(e.New)); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.CheckChange(t.Context(), before, after, "p", []verify.Change{{Path: e.Path}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func localStore(t *testing.T, files map[string]string) *storage.Local {
	t.Helper()
	s, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if _, err := s.Write(t.Context(), "p", p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
