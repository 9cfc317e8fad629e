package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// setupCommands is setup with the TypeScript fixture, scripts put over its
// package.json's, and a sandbox workspace over the project.
func setupCommands(t *testing.T, scripts map[string]string) (*tools.Registry, tools.Env) {
	t.Helper()
	reg, env, _ := setupCommandsWith(t, scripts, sandbox.Config{MaxOutputBytes: 256 << 10})
	return reg, env
}

// setupCommandsWith is setupCommands with a sandbox of cfg.
func setupCommandsWith(t *testing.T, scripts map[string]string, cfg sandbox.Config) (*tools.Registry, tools.Env, *sandbox.Sandbox) {
	t.Helper()
	files := sandboxtest.Fixture()
	var pkg map[string]any
	if err := json.Unmarshal([]byte(files["package.json"]), &pkg); err != nil {
		t.Fatal(err)
	}
	for k, v := range scripts {
		pkg["scripts"].(map[string]any)[k] = v
	}
	b, _ := json.Marshal(pkg)
	files["package.json"] = string(b)
	reg, env := setup(t, files)
	sb := sandboxtest.New(t, cfg)
	env.Workspace = sb.Workspace(t.Name(), env.Store, env.ProjectID)
	t.Cleanup(func() { env.Workspace.Close() })
	return reg, env, sb
}

// TestRunCommandOverItsLimits: a command that fills its workspace is told
// to write less, and that the workspace was reset; one the kernel killed
// for its sandbox's memory is told to use less memory.
func TestRunCommandOverItsLimits(t *testing.T) {
	t.Parallel()
	cfg := sandbox.Config{MaxWorkspaceBytes: 64 << 20, Limits: sandbox.Limits{SandboxMemoryBytes: 384 << 20}}
	reg, env, sb := setupCommandsWith(t, map[string]string{
		"build": "head -c 80M /dev/zero > out.bin",
		"test":  `python3 -c 'import mmap; m = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS); [m.__setitem__(i, 1) for i in range(0, 1 << 30, 4096)]'`,
	}, cfg)
	sandboxtest.RequireCapped(t, sb)
	for _, tc := range []struct{ command, summary, hint string }{
		{"npm_build", "it filled the workspace (64 MiB): writes past it failed with no space left on device",
			"write less in the project's directory (build output, caches, logs); it was reset to the project's files"},
		{"npm_test", "it used more than 384 MiB of memory as a whole",
			"use less memory, or fewer processes and threads at once: the cap holds for all of them together"},
	} {
		r := reg.Call(t.Context(), env, tools.RunCommand, `{"command":"`+tc.command+`"}`)
		out := decodeOutput(t, r.Output)
		if r.Success || !strings.Contains(r.Summary, tc.summary) || out["hint"] != tc.hint {
			t.Errorf("%s: success %v, summary %q\n%s", tc.command, r.Success, r.Summary, r.Output)
		}
	}
}

func decodeOutput(t *testing.T, s string) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("output %q: %v", s, err)
	}
	return out
}

func TestRunCommandIsForBuildsOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		taskType string
		offered  bool
	}{{"build", true}, {"chat", false}, {"plan", false}} {
		reg, err := tools.ForTaskType(tc.taskType)
		if err != nil {
			t.Fatal(err)
		}
		if reg.Has(tools.RunCommand) != tc.offered {
			t.Errorf("%s: run_command offered = %v", tc.taskType, !tc.offered)
		}
		if tc.offered {
			if reg.Without(tools.RunCommand).Has(tools.RunCommand) || !reg.Has(tools.RunCommand) {
				t.Error("Without did not drop run_command, or changed the registry it copied")
			}
			continue
		}
		r := reg.Call(t.Context(), tools.Env{}, tools.RunCommand, `{"command":"npm_typecheck"}`)
		if r.Success || !strings.Contains(r.Output, "tool run_command is not allowed for "+tc.taskType+" tasks") {
			t.Errorf("%s: %s", tc.taskType, r.Output)
		}
	}
}

func TestRunCommandRefusals(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, map[string]string{"package.json": `{"scripts": {"typecheck": "true"}}`})
	for _, tc := range []struct{ name, args, want string }{
		{"NotWhitelisted", `{"command":"rm -rf /"}`, `unknown command \"rm -rf /\"`},
		{"UnknownField", `{"command":"npm_test","cwd":"/"}`, "invalid arguments for run_command"},
		{"Off", `{"command":"npm_typecheck"}`, "RUN_COMMAND is off"},
	} {
		r := reg.Call(t.Context(), env, tools.RunCommand, tc.args)
		if r.Success || !strings.Contains(r.Output, tc.want) {
			t.Errorf("%s: %s", tc.name, r.Output)
		}
	}
}

func TestRunCommandReportsExitCodeAndOutput(t *testing.T) {
	t.Parallel()
	reg, env := setupCommands(t, map[string]string{
		"lint": "echo 'src/index.ts: 1 problem' && exit 1",
		"test": "sleep 60",
		// About 1 MiB: over the output kept (256 KiB) and the model's view.
		"build": `node -e "console.log('FIRST'); for (let i = 0; i < 1024; i++) console.log('y'.repeat(1023)); console.log('LAST')"`,
	})
	ctx := t.Context()

	r := reg.Call(ctx, env, tools.RunCommand, `{"command":"npm_lint"}`)
	out := decodeOutput(t, r.Output)
	if !r.Success || out["passed"] != false || out["exitCode"] != float64(1) || out["script"] != "npm run lint" ||
		!strings.Contains(out["output"].(string), "src/index.ts: 1 problem") {
		t.Fatalf("lint: %s", r.Output)
	}
	if r.Command != "npm run lint" || r.ExitCode == nil || *r.ExitCode != 1 || len(r.Logs) != 1 || r.Logs[0].Level != "warn" {
		t.Errorf("lint result: command %q, exit %v, logs %+v", r.Command, r.ExitCode, r.Logs)
	}
	if !strings.HasPrefix(r.Summary, "npm run lint failed with exit code 1 after ") {
		t.Errorf("summary = %q", r.Summary)
	}

	r = reg.Call(ctx, env, tools.RunCommand, `{"command":"npm_test","timeout":1500}`)
	if r.Success || !strings.Contains(r.Output, "npm run test was killed after its 1.5s timeout") || *r.ExitCode != -1 {
		t.Fatalf("test: %s", r.Output)
	}

	r = reg.Call(ctx, env, tools.RunCommand, `{"command":"npm_build"}`)
	model := decodeOutput(t, r.Output)["output"].(string)
	full := decodeOutput(t, r.Full)["output"].(string)
	if !r.Success || len(model) > sandbox.ModelHeadBytes+sandbox.ModelTailBytes+300 || !strings.Contains(model, "FIRST") ||
		!strings.HasSuffix(model, "LAST\n") || !strings.Contains(model, "cut from the middle") {
		t.Fatalf("the model's view: %d bytes", len(model))
	}
	if len(full) < 200<<10 || len(full) > 260<<10 || !strings.HasSuffix(full, "LAST\n") {
		t.Fatalf("the output kept: %d bytes", len(full))
	}

	r = reg.Call(ctx, env, tools.RunCommand, `{"command":"npm_typecheck"}`)
	if out := decodeOutput(t, r.Output); !r.Success || out["passed"] != true || r.Logs[0].Level != "info" {
		t.Fatalf("typecheck: %s", r.Output)
	}
}

func TestRunCommandMissingScript(t *testing.T) {
	t.Parallel()
	reg, env := setupCommands(t, nil)
	r := reg.Call(t.Context(), env, tools.RunCommand, `{"command":"npm_test"}`)
	out := decodeOutput(t, r.Output)
	if r.Success || out["error"] != `run_command: package.json has no "test" script; it has: build, typecheck` {
		t.Fatalf("%s", r.Output)
	}
}

// TestRunCommandRefusesAGitDependency: the model is told that a
// dependency from a git repository is not installed, and what to do.
func TestRunCommandRefusesAGitDependency(t *testing.T) {
	t.Parallel()
	reg, env := setupCommands(t, nil)
	pkg := `{"name": "p", "scripts": {"typecheck": "tsc"}, "dependencies": {"outer": "git+https://example.com/outer.git"}}`
	if _, err := env.Store.Write(t.Context(), env.ProjectID, "package.json", []byte(pkg)); err != nil {
		t.Fatal(err)
	}
	r := reg.Call(t.Context(), env, tools.RunCommand, `{"command":"npm_typecheck"}`)
	if r.Success || r.ExitCode != nil ||
		!strings.Contains(r.Output, `package.json: dependency \"outer\" is a git repository (\"git+https://example.com/outer.git\"): only packages of the registry are installed`) ||
		!strings.Contains(r.Output, "depend on packages of the npm registry by version or range") {
		t.Fatalf("%+v", r)
	}
}
