package prereq_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/testing/prereq"
)

// TestMissing runs TestMissingTool in a child test process, once as a
// developer would (it skips) and once as CI (it fails), and checks the one
// line it prints.
func TestMissing(t *testing.T) {
	if os.Getenv("PREREQ_CHILD") == "1" {
		t.Skip("the child runs TestMissingTool only")
	}
	t.Parallel()
	const scripted, machine = "frobnicator is not installed (not on PATH): run ./scripts/test, which installs it",
		"frobnicator is not installed (not on PATH): apt-get install frobnicator"
	for _, tc := range []struct {
		name, test, ci string
		fails          bool
		want, line     string
	}{
		{"Developer", "TestMissingTool", "", false, "--- SKIP: TestMissingTool", scripted},
		{"CI", "TestMissingTool", "true", true, "--- FAIL: TestMissingTool", scripted},
		{"DeveloperMachineTool", "TestMissingMachineTool", "", false, "--- SKIP: TestMissingMachineTool", machine},
		{"CIMachineTool", "TestMissingMachineTool", "true", true, "--- FAIL: TestMissingMachineTool", machine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^"+tc.test+"$", "-test.v")
			cmd.Env = append(os.Environ(), "PREREQ_CHILD=1", "CI="+tc.ci)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if failed := errors.As(err, &exit); failed != tc.fails || (err != nil && !failed) {
				t.Fatalf("child test: %v, want failed = %t\n%s", err, tc.fails, out)
			}
			text := string(out)
			if !strings.Contains(text, tc.want) || !strings.Contains(text, tc.line) {
				t.Errorf("child output lacks %q and the install line:\n%s", tc.want, text)
			}
		})
	}
}

func TestMissingTool(t *testing.T) {
	if os.Getenv("PREREQ_CHILD") != "1" {
		t.Skip("run by TestMissing in a child process")
	}
	prereq.Missing(t, "frobnicator", errors.New("not on PATH"))
	t.Error("Missing returned")
}

func TestMissingMachineTool(t *testing.T) {
	if os.Getenv("PREREQ_CHILD") != "1" {
		t.Skip("run by TestMissing in a child process")
	}
	prereq.MissingFromMachine(t, "frobnicator", "apt-get install frobnicator", errors.New("not on PATH"))
	t.Error("MissingFromMachine returned")
}
