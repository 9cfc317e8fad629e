package supervise

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/testing/poll"
)

// TestChildDiesWithItsParent kills a parent (this test binary, run as a
// helper) with SIGKILL: its child must not survive it.
func TestChildDiesWithItsParent(t *testing.T) {
	t.Parallel()
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := parent.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = parent.Process.Kill()
		_ = parent.Wait()
		t.Fatalf("read the child's pid from the parent: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if !Running(pid) {
		t.Fatalf("child %d is not running while its parent is", pid)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	poll.Until(t, fmt.Sprintf("child %d to die with its parent", pid), 10*time.Second, func() bool { return !Running(pid) })
}

// TestRunning: this process runs; a child that exited does not, reaped or
// not (a zombie waits for its parent's wait).
func TestRunning(t *testing.T) {
	t.Parallel()
	if !Running(os.Getpid()) {
		t.Error("Running(own pid) = false")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "an exited child, not reaped, to be taken for gone", 10*time.Second, func() bool { return !Running(cmd.Process.Pid) })
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if Running(cmd.Process.Pid) {
		t.Error("Running(a reaped child) = true")
	}
}
