package sandbox

import (
	"strings"
	"testing"
	"time"
)

// TestDevIsReadOnlyAndShmBounded: nothing can be written to /dev but its
// device nodes and a /dev/shm of ShmBytes; /tmp holds TmpBytes.
func TestDevIsReadOnlyAndShmBounded(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	ws := reachableDir(t)
	if err := sb.own(ws); err != nil {
		t.Fatal(err)
	}
	script := `echo x > /dev/aw-file && echo WROTE-DEV; echo x > /dev/null && echo NULL-OK
head -c 64M /dev/zero > /dev/shm/big; echo shm=$(stat -c %s /dev/shm/big)
head -c 400M /dev/zero > /tmp/big; echo tmp=$(stat -c %s /tmp/big)`
	res, err := sb.exec(t.Context(), spec{workspace: ws, argv: []string{"sh", "-c", script}, timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := res.output.Full()
	for _, want := range []string{"NULL-OK", "Read-only file system", "shm=16777216", "tmp=268435456"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WROTE-DEV") {
		t.Errorf("a file was written to /dev:\n%s", out)
	}
}
