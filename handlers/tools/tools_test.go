package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
)

func setup(t *testing.T, files map[string]string) (*tools.Registry, tools.Env) {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := tools.Env{Store: store, ProjectID: "p"}
	for p, c := range files {
		if _, err := store.Write(t.Context(), "p", p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := tools.ForTaskType("build")
	if err != nil {
		t.Fatal(err)
	}
	return reg, env
}

func args(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestApplyPatchAllOrNothing(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, map[string]string{"a.txt": "one\ntwo\n", "b.txt": "x\n"})
	bad := "*** Begin Patch\n*** Update File: a.txt\n-one\n+ONE\n*** Update File: b.txt\n-missing\n+y\n*** End Patch"
	if r := reg.Call(t.Context(), env, "apply_patch", args(map[string]string{"patch": bad})); r.Success || !strings.Contains(r.Output, "nothing was applied") {
		t.Fatalf("bad patch: %+v", r)
	}
	if c, _, _ := env.Store.Read(t.Context(), "p", "a.txt"); string(c) != "one\ntwo\n" {
		t.Fatalf("a.txt changed by a failed patch: %q", c)
	}
	good := "*** Begin Patch\n*** Update File: a.txt\n*** Move to: c.txt\n one\n-two\n+TWO\n*** Delete File: b.txt\n*** Add File: d.txt\n+d\n*** End Patch"
	r := reg.Call(t.Context(), env, "apply_patch", args(map[string]string{"patch": good}))
	if !r.Success || len(r.Changes) != 3 {
		t.Fatalf("good patch: %+v", r)
	}
	list, _ := env.Store.List(t.Context(), "p", "")
	var paths []string
	for _, f := range list {
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, ",") != "c.txt,d.txt" {
		t.Fatalf("files = %v", paths)
	}
}

func TestMoveFileOutcomes(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, map[string]string{"a.txt": "a", "b.txt": "b"})
	for _, tt := range []struct {
		name string
		args map[string]any
		want string
		ok   bool
	}{
		{"SourceMissing", map[string]any{"fromPath": "x.txt", "toPath": "y.txt"}, "source file does not exist", false},
		{"TargetExists", map[string]any{"fromPath": "a.txt", "toPath": "b.txt"}, "target file already exists", false},
		{"Moved", map[string]any{"fromPath": "a.txt", "toPath": "c.txt"}, "file moved", true},
	} {
		r := reg.Call(t.Context(), env, "move_file", args(tt.args))
		if r.Success != tt.ok || !strings.Contains(r.Summary, tt.want) || r.FromPath == "" {
			t.Errorf("%s: %+v", tt.name, r)
		}
	}
}

func TestProjectStructureGlobs(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, map[string]string{"src/a.ts": "", "src/b.css": "", "node_modules/x/i.js": "", "dist/o.js": ""})
	r := reg.Call(t.Context(), env, "get_project_structure", args(map[string]any{"include_patterns": []string{"src/**/*.ts"}, "depth": 3}))
	if !r.Success || !strings.Contains(r.Output, `"totalFiles":1`) {
		t.Fatalf("include: %s", r.Output)
	}
	r = reg.Call(t.Context(), env, "get_project_structure", args(map[string]any{"max_files": 1}))
	if !strings.Contains(r.Output, `"totalFiles":2`) || !strings.Contains(r.Output, `"truncated":true`) {
		t.Fatalf("defaults: %s", r.Output)
	}
}
