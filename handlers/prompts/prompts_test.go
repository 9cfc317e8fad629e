package prompts_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentworker/agentworker/handlers/prompts"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file; if the change is meant, bump prompts.Version and run go test -update\n--- got:\n%s", path, got)
	}
}

func TestRenderedPrompts(t *testing.T) {
	t.Parallel()
	set, err := prompts.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx := prompts.Context{ProjectID: "7b0c2f4e-0000-4000-8000-000000000001", Files: []string{"index.html", "package.json", "src/App.tsx", "src/main.tsx"},
		FileCount: 250, Truncated: true, ProjectType: "react", TypeScript: true, Tooling: []string{"vite"},
		EntryPoints: []string{"index.html", "src/main.tsx"}, RecentFiles: []string{"src/App.tsx"}}
	withPlan := ctx
	withPlan.PlanSummary = "Add a banner.\n1. [step-1] create_file src/Banner.tsx: a banner component"
	empty := prompts.Context{ProjectID: "p", ProjectType: "unknown"}
	for _, tt := range []struct {
		name string
		typ  string
		ctx  prompts.Context
	}{
		{"build", "build", ctx}, {"build_plan", "build", withPlan}, {"build_empty", "build", empty},
		{"chat", "chat", ctx}, {"plan", "plan", ctx},
	} {
		got, err := set.System(tt.typ, tt.ctx)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, tt.name, got)
	}
	repair, err := set.RepairMessage(prompts.Repair{Attempt: 1, MaxAttempts: 2, Trigger: "tool_failures",
		Error: "3 consecutive tool calls failed; last: edit_file: not found", Touched: []string{"src/a.ts"},
		FailedCalls: []prompts.FailedCall{{Call: `edit_file {"new_string":"b","old_string":"a","path":"src/a.ts"}`, Error: "edit_file src/a.ts: the text to replace was not found"}}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "repair", repair)
	cg, err := set.CodeGenSystem(prompts.CodeGen{Task: "add a banner", Path: "src/Banner.tsx", Language: "TypeScript React (TSX)",
		Description: "a banner component", Exists: true, Existing: "export {}\n"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "codegen", cg)
	if _, err := set.System("deploy", ctx); err == nil {
		t.Error("rendered a prompt for an unknown task type")
	}
}
