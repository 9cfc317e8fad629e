package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// helperEnv makes the test binary a parent that starts a child, prints its
// pid and waits until its stdin closes or it is killed.
const helperEnv = "SUPERVISE_TEST_PARENT"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		c, err := Start(exec.Command("sleep", "600"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.Pid())
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		c.Kill()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// start starts a shell script as a child (its $0 is arg) and kills it in
// t.Cleanup if it still runs.
func start(t *testing.T, script, arg string) *Child {
	t.Helper()
	c, err := Start(exec.Command("sh", "-c", script, arg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// waitFile waits until the child has created path: the point from which
// its script's traps are set.
func waitFile(t *testing.T, c *Child, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 10*time.Millisecond, func(context.Context) error {
		_, err := os.Stat(path)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
		want   error  // nil: a clean stop
		text   string // in the error
	}{
		// sleep ends by SIGTERM, the signal asked for: a clean exit.
		{name: "EndsByTheSignal", script: `touch "$0"; exec sleep 600`},
		{name: "ExitsCleanly", script: `trap "exit 0" TERM; touch "$0"; while :; do sleep 0.05; done`},
		{name: "ExitFailureIsReported", script: `trap "exit 3" TERM; touch "$0"; while :; do sleep 0.05; done`, text: "exit status 3"},
		{name: "IgnoredSignalKills", script: `trap "" TERM; touch "$0"; exec sleep 600`, want: ErrKilled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ready := filepath.Join(t.TempDir(), "ready")
			c := start(t, tc.script, ready)
			waitFile(t, c, ready)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := c.Stop(ctx, syscall.SIGTERM)
			select {
			case <-c.Exited():
			default:
				t.Fatal("Stop returned before the child exited")
			}
			switch {
			case tc.want == nil && tc.text == "" && err != nil:
				t.Errorf("Stop = %v, want nil", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("Stop = %v, want %v", err, tc.want)
			case tc.text != "" && (err == nil || !strings.Contains(err.Error(), tc.text)):
				t.Errorf("Stop = %v, want an error saying %q", err, tc.text)
			}
		})
	}
}

func TestWaitReady(t *testing.T) {
	t.Parallel()
	errNotYet, errFinal := errors.New("not yet"), errors.New("final")
	for _, tc := range []struct {
		name    string
		script  string
		ready   func(context.Context) error
		timeout time.Duration
		want    error
	}{
		{name: "Ready", script: "exec sleep 600", ready: func(context.Context) error { return nil }},
		{name: "ChildExits", script: "exit 3", ready: func(context.Context) error { return errNotYet }, want: ErrExited},
		{name: "PermanentError", script: "exec sleep 600", ready: func(context.Context) error { return Permanent(errFinal) }, want: errFinal},
		{name: "ContextEnds", script: "exec sleep 600", ready: func(context.Context) error { return errNotYet },
			timeout: 100 * time.Millisecond, want: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := start(t, tc.script, "")
			ctx, cancel := context.WithTimeout(t.Context(), cmpOr(tc.timeout, 30*time.Second))
			defer cancel()
			err := c.WaitReady(ctx, 10*time.Millisecond, tc.ready)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("WaitReady = %v, want %v", err, tc.want)
			}
			if tc.want == errFinal && err != errFinal {
				t.Errorf("WaitReady = %#v, want ready's error itself, unmarked", err)
			}
		})
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	if _, err := Start(exec.Command(filepath.Join(t.TempDir(), "absent"))); err == nil {
		t.Fatal("Start of a missing binary = nil, want an error")
	}
}
