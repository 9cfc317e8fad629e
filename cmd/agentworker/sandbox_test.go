package main

import (
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// TestRunCommandOffSaysWhy: RUN_COMMAND=off and a sandbox that cannot
// start both leave commands off, and the log says why.
func TestRunCommandOffSaysWhy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  config
		want string
	}{
		{"Off", config{RunCommand: "off"}, "run_command is off (RUN_COMMAND=off)"},
		{"CannotStart", config{RunCommand: "sandbox", RunDir: "/proc/agentworker-sandbox", RunConcurrency: 1},
			`run_command is off: the sandbox cannot start on this host" reason="sandbox unavailable: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs logtest.Buffer
			if sb, _ := tc.cfg.sandbox(t.Context(), slog.New(slog.NewTextHandler(&logs, nil))); sb != nil {
				t.Fatal("commands are on")
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log = %s, want %q", logs.String(), tc.want)
			}
		})
	}
}

func TestProjectChecksFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"typecheck,lint,test": "typecheck|lint|test", " typecheck , test ": "typecheck|test", "none": "", "": ""} {
		got := config{RunChecks: in}.projectChecks()
		if got == nil || strings.Join(got, "|") != want {
			t.Errorf("RUN_COMMAND_CHECKS=%q: %q, want %q", in, got, want)
		}
	}
}

// TestServeSandboxSelfCheck: on a host with the Debian packages the
// runtime image installs (each program the sandbox needs comes from the
// package sandbox.Packages names, as dpkg says), serve's self-check runs a
// sandboxed process and turns commands on, and says so.
func TestServeSandboxSelfCheck(t *testing.T) {
	t.Parallel()
	for program, pkg := range sandbox.Packages() {
		path, err := exec.LookPath(program)
		if err != nil {
			t.Fatalf("%s: %v (install the %s package)", program, err, pkg)
		}
		out, err := exec.Command("dpkg", "-S", path).CombinedOutput()
		from, _, _ := strings.Cut(string(out), ":")
		// A nodejs package from Node's own repository brings npm itself.
		if err != nil || from != pkg && !(program == "npm" && from == "nodejs") {
			t.Errorf("%s (%s) is not from the %s package: %s %v", program, path, pkg, out, err)
		}
	}
	var logs logtest.Buffer
	// Commands run where the host gives no cgroup to cap a sandbox as a
	// whole too (the sandbox's own tests cover the cap and its refusal).
	cfg := config{RunCommand: "sandbox", RunDir: sandboxtest.Dir(t), RunConcurrency: 1, RunAllowUncapped: true}
	sb, commands := cfg.sandbox(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)))
	if sb == nil || commands != "on" || !strings.Contains(logs.String(), "run_command is on") || !strings.Contains(logs.String(), `limits="`) {
		t.Fatalf("commands %q, log %s", commands, logs.String())
	}
}
