package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAnInheritedDescriptorDoesNotReachTheSandbox: descriptors this process
// holds without close-on-exec when the sandbox starts (as a worker started
// from a shell holding a file and / open would) are not open in a
// sandboxed process, which can read neither.
// Not parallel: every sandbox started meanwhile marks the descriptors too.
func TestAnInheritedDescriptorDoesNotReachTheSandbox(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:SECRET-HASH\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := syscall.Open(secret, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(file) })
	root, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(root) })
	sb := newTestSandbox(t)
	ws := reachableDir(t)
	if err := sb.own(ws); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("ls -l /proc/self/fd; cat <&%d; ls /proc/self/fd/%d/; echo end", file, root)
	res, err := sb.exec(t.Context(), spec{workspace: ws, argv: []string{"sh", "-c", script}, timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := res.output.Full()
	for _, leak := range []string{"SECRET-HASH", secret, "lost+found", fmt.Sprintf(" %d -> ", file), fmt.Sprintf(" %d -> ", root)} {
		if strings.Contains(out, leak) {
			t.Fatalf("the sandbox reached an inherited descriptor (%q):\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "end") {
		t.Fatalf("the script did not run:\n%s", out)
	}
}
