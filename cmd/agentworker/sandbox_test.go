package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/testing/logtest"
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
			if sb := tc.cfg.sandbox(t.Context(), slog.New(slog.NewTextHandler(&logs, nil))); sb != nil {
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
