package sandbox_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// deepDirs makes and enters 20 directories of 200 characters: within the
// 4,096-byte path limit as /work/…, past it at the workspace's host path.
const deepDirs = `d=$(printf 'd%.0s' $(seq 200)); for i in $(seq 20); do mkdir $d && cd $d || exit 1; done`

// scriptProject is a project of one package.json, without dependencies,
// whose scripts are scripts.
func scriptProject(t *testing.T, scripts map[string]string) (*storage.Local, string) {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"name": "limits", "version": "1.0.0", "scripts": {`)
	first := true
	for name, script := range scripts {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString(`"` + name + `": "` + strings.ReplaceAll(script, `"`, `\"`) + `"`)
	}
	b.WriteString("}}\n")
	if _, err := store.Write(t.Context(), project, "package.json", []byte(b.String())); err != nil {
		t.Fatal(err)
	}
	return store, project
}

// diskUse is what the files under dir take on disk; every directory must
// be readable.
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var bytes int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		bytes += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Errorf("measure %s: %v", dir, err)
	}
	return bytes
}

// TestTheWorkspaceCapHoldsWhateverTheNamesAndPermissions: a command writes
// 3 × 200 MiB against the 512 MiB cap where a walk of the workspace cannot
// see it, in a directory it made unreadable or under a path past 4,096
// bytes. The writes past the cap fail, the command fails, nothing of it
// stays on disk, and the workspace is removed.
func TestTheWorkspaceCapHoldsWhateverTheNamesAndPermissions(t *testing.T) {
	t.Parallel()
	fill := `for i in 1 2 3; do dd if=/dev/zero of=fill$i bs=1M count=200 status=none || exit 1; done; echo filled`
	for _, w := range sandboxtest.Workers() {
		t.Run(w.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct{ name, hide string }{
				{"UnreadableDirectory", "mkdir -p hide/d && cd hide/d && chmod 000 ../../hide"},
				{"DeepPath", deepDirs},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					w.Run(t, func(t *testing.T) {
						store, p := scriptProject(t, map[string]string{"attack": tc.hide + " && " + fill})
						dir := sandboxtest.Dir(t)
						sb := sandboxtest.New(t, sandbox.Config{Dir: dir, CacheDir: sandboxtest.Dir(t)})
						ws := sb.Workspace(t.Name(), store, p)
						out, err := ws.Run(t.Context(), "attack", 2*time.Minute)
						if err != nil {
							t.Fatal(err)
						}
						if out.Passed() || out.OverLimit != "it filled the workspace (512 MiB): writes past it failed with no space left on device" ||
							strings.Contains(out.Output.Full(), "\nfilled\n") {
							t.Errorf("over the cap: %s, over limit %q\n%s", out.Summary(), out.OverLimit, out.Output.Full())
						}
						if used := diskUse(t, dir); used > 1<<20 {
							t.Errorf("%d MiB stay on the host's disk after the command", used>>20)
						}
						if err := ws.Close(); err != nil {
							t.Errorf("close: %v", err)
						}
						var left []string
						_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
							if err != nil || !d.IsDir() {
								left = append(left, p)
							}
							return nil
						})
						if len(left) > 0 {
							t.Errorf("left after close: %q", left)
						}
					})
				})
			}
		})
	}
}

// TestStartRemovesWorkspacesItCannotRead: a workspace left by a process
// that is gone, holding a directory its owner made unreadable and one past
// 4,096 bytes, is removed when the next sandbox starts.
func TestStartRemovesWorkspacesItCannotRead(t *testing.T) {
	t.Parallel()
	for _, w := range sandboxtest.Workers() {
		t.Run(w.Name, func(t *testing.T) {
			t.Parallel()
			w.Run(t, func(t *testing.T) {
				dir := sandboxtest.Dir(t)
				stale := filepath.Join(dir, "run-gone-1")
				if err := os.MkdirAll(filepath.Join(stale, "ws", "hide", "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(stale, "ws", "hide", "d", "f"), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				deep := filepath.Join(stale, "ws", "deep")
				root, err := os.OpenRoot(filepath.Join(stale, "ws"))
				if err != nil {
					t.Fatal(err)
				}
				rel := "deep"
				for range 25 {
					rel += "/" + strings.Repeat("d", 200)
				}
				if err := root.MkdirAll(rel, 0o755); err != nil {
					t.Fatal(err)
				}
				root.Close()
				if err := os.Chmod(filepath.Join(stale, "ws", "hide"), 0); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(filepath.Join(stale, "ws", "hide"), 0o755) })
				sandboxtest.New(t, sandbox.Config{Dir: dir, CacheDir: sandboxtest.Dir(t)})
				if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the stale workspace is still there (%v); %s", err, deep)
				}
			})
		})
	}
}

// TestWhatACommandLeftRunningEndsWithIt: a process the command started in
// the background ends with it: what it would write later never lands in
// the workspace.
func TestWhatACommandLeftRunningEndsWithIt(t *testing.T) {
	t.Parallel()
	store, p := scriptProject(t, map[string]string{"leave": "(sleep 3; echo late > late.txt) & echo now > now.txt"})
	sb := sandboxtest.New(t, sandbox.Config{CacheDir: sandboxtest.Dir(t)})
	ws := sb.Workspace(t.Name(), store, p)
	t.Cleanup(func() { ws.Close() })
	out, err := ws.Run(t.Context(), "leave", time.Minute)
	if err != nil || !out.Passed() || out.Duration > 2*time.Second {
		t.Fatalf("%v, %s\n%s", err, out.Summary(), out.Output.Full())
	}
	if b, err := os.ReadFile(filepath.Join(ws.Dir(), "now.txt")); err != nil || string(b) != "now\n" {
		t.Errorf("now.txt: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), "late.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("late.txt: %v", err)
	}
}
