package sandbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const project = "p"

type fixture struct {
	sb    *sandbox.Sandbox
	store *storage.Local
	ws    *sandbox.Workspace
}

// setup makes a project of the TypeScript fixture with extra scripts (the
// dependencies stay the same: the cached install serves them all) and
// files, and its workspace.
func setup(t *testing.T, scripts map[string]string, files map[string]string) *fixture {
	t.Helper()
	sb := sandboxtest.New(t, sandbox.Config{})
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	all := sandboxtest.Fixture()
	if len(scripts) > 0 {
		var pkg map[string]any
		if err := json.Unmarshal([]byte(all["package.json"]), &pkg); err != nil {
			t.Fatal(err)
		}
		s := pkg["scripts"].(map[string]any)
		for k, v := range scripts {
			s[k] = v
		}
		b, _ := json.MarshalIndent(pkg, "", "  ")
		all["package.json"] = string(b)
	}
	for p, c := range files {
		all[p] = c
	}
	for p, c := range all {
		if _, err := store.Write(t.Context(), project, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	ws := sb.Workspace(t.Name(), store, project)
	t.Cleanup(func() {
		if err := ws.Close(); err != nil {
			t.Error(err)
		}
	})
	return &fixture{sb: sb, store: store, ws: ws}
}

func (f *fixture) run(t *testing.T, script string, timeout time.Duration) sandbox.Outcome {
	t.Helper()
	out, err := f.ws.Run(t.Context(), script, timeout)
	if err != nil {
		t.Fatalf("run %s: %v", script, err)
	}
	if out.Stage != sandbox.StageRun {
		t.Fatalf("run %s: %s\n%s", script, out.Summary(), out.Output.Full())
	}
	return out
}

func TestTypecheckReportsTheTypeErrorThenPasses(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	start := time.Now()
	first := f.run(t, "typecheck", 0)
	cold := time.Since(start)
	if !first.Passed() {
		t.Fatalf("fixture: %s\n%s", first.Summary(), first.Output.Full())
	}
	if _, err := f.store.Write(t.Context(), project, "src/index.ts", []byte("const n: number = 'one'\nconsole.log(n)\n")); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out := f.run(t, "typecheck", 0)
	warm := time.Since(start)
	if out.Passed() || out.ExitCode != 2 || !strings.Contains(out.Output.Full(), "src/index.ts(1,7): error TS2322: Type 'string' is not assignable to type 'number'.") {
		t.Fatalf("after a type error: %s\n%s", out.Summary(), out.Output.Full())
	}
	if out.Sync.Written != 1 || out.Sync.Removed != 0 || !out.Install.Cached {
		t.Errorf("second run: sync %+v, install %+v; want one file written, the install cached", out.Sync, out.Install)
	}
	t.Logf("typecheck round trip (sync + run): cold %s (install %s, cached %v), warm %s (sync %s, command %s)",
		cold, first.Install.Duration, first.Install.Cached, warm, out.Sync.Duration, out.Duration)
}

func TestMissingScriptListsTheScripts(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	_, err := f.ws.Run(t.Context(), "lint", 0)
	var se *sandbox.ScriptError
	if !errors.As(err, &se) || se.Error() != `package.json has no "lint" script; it has: build, typecheck` {
		t.Fatalf("err = %v", err)
	}
	if _, err := f.ws.Run(t.Context(), "--help", 0); err == nil {
		t.Fatal("an option ran as a script")
	}
}

// TestTimeoutKillsEveryProcess runs a script that starts a background
// process and sleeps: on timeout both are gone when Run returns (the shell
// npm starts and node carry the marker in their command lines).
func TestTimeoutKillsEveryProcess(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("aw-marker-%d", time.Now().UnixNano())
	f := setup(t, map[string]string{"hang": "node -e 'setInterval(() => {}, 1000)' " + marker + " & sleep 300"}, nil)
	out := f.run(t, "hang", 2*time.Second)
	if !out.TimedOut || out.ExitCode != -1 || out.Passed() {
		t.Fatalf("outcome: %+v", out)
	}
	if out.Duration > 30*time.Second {
		t.Errorf("killed after %s", out.Duration)
	}
	if left := processesWith(t, marker); len(left) > 0 {
		t.Fatalf("processes left after the timeout: %v", left)
	}
	if !strings.Contains(out.Summary(), "killed after its 2s timeout") {
		t.Errorf("summary = %q", out.Summary())
	}
}

// processesWith returns the command lines of the host's processes that
// contain s.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func TestNoNetwork(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	connect := func(host string, port int) string {
		return fmt.Sprintf(`node -e "require('net').connect(%d, '%s').on('connect', () => { console.log('CONNECTED'); process.exit(0) }).on('error', e => { console.log('FAILED', e.code); process.exit(3) })"`, port, host)
	}
	f := setup(t, map[string]string{
		"loopback": connect("127.0.0.1", port),
		"registry": connect("registry.npmjs.org", 443),
	}, nil)
	for _, script := range []string{"loopback", "registry"} {
		out := f.run(t, script, time.Minute)
		if out.ExitCode != 3 || !strings.Contains(out.Output.Full(), "FAILED") {
			t.Errorf("%s: %s\n%s", script, out.Summary(), out.Output.Full())
		}
	}
	select {
	case <-accepted:
		t.Fatal("the host's listener accepted a connection from the sandbox")
	default:
	}
}

func TestWritesOutsideTheWorkspaceFail(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("aw-escape-%d", time.Now().UnixNano())
	targets := []string{"/usr/" + name, "/etc/" + name, "/" + name, "/work/node_modules/" + name, "/proc/" + name}
	f := setup(t, map[string]string{
		"escape": fmt.Sprintf(`for f in %s; do if (echo x > $f) 2>/dev/null; then echo WROTE $f; fi; done; echo x > /tmp/scratch && echo x > inside.txt && echo done`, strings.Join(targets, " ")),
	}, nil)
	out := f.run(t, "escape", time.Minute)
	text := out.Output.Full()
	if strings.Contains(text, "WROTE /") || !strings.Contains(text, "\ndone\n") {
		t.Fatalf("%s\n%s", out.Summary(), text)
	}
	for _, p := range []string{"/usr/" + name, "/etc/" + name, "/" + name} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s was written on the host", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(f.ws.Dir(), "inside.txt")); err != nil || string(b) != "x\n" {
		t.Errorf("the workspace write: %q, %v", b, err)
	}
}

// TestSyncDoesNotFollowACommandsSymlinks: a command replaces a directory by
// a symlink to a host directory; the next sync writes into the workspace,
// not through the link.
func TestSyncDoesNotFollowACommandsSymlinks(t *testing.T) {
	t.Parallel()
	outside := sandboxtest.Dir(t)
	f := setup(t, map[string]string{"swap": "rm -rf src && ln -s " + outside + " src && echo swapped"}, nil)
	f.run(t, "swap", time.Minute)
	if _, err := f.store.Write(t.Context(), project, "src/greet.ts", []byte("export const x = 1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ws.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Fatalf("the sync wrote through the symlink: %v", entries)
	}
	fi, err := os.Lstat(filepath.Join(f.ws.Dir(), "src"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("src: %v, %v", fi, err)
	}
	for _, p := range []string{"src/greet.ts", "src/index.ts"} {
		if _, err := os.Stat(filepath.Join(f.ws.Dir(), p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestLongOutputIsCutInTheMiddle(t *testing.T) {
	t.Parallel()
	// 10 MiB in 1 MiB lines of "x", framed by a first and a last line.
	f := setup(t, map[string]string{
		"loud": `node -e "console.log('FIRST'); for (let i = 0; i < 10; i++) console.log('x'.repeat(1 << 20)); console.log('LAST')"`,
	}, nil)
	out := f.run(t, "loud", time.Minute)
	if !out.Passed() {
		t.Fatalf("%s", out.Summary())
	}
	if out.Output.Bytes < 10<<20 || out.Output.Lines < 12 {
		t.Fatalf("printed %d bytes, %d lines", out.Output.Bytes, out.Output.Lines)
	}
	full := out.Output.Full()
	if len(full) > (1<<20)+500 || !strings.Contains(full, "FIRST") || !strings.HasSuffix(full, "LAST\n") || !strings.Contains(full, "cut from the middle") {
		t.Fatalf("kept %d bytes: head %q, tail %q", len(full), full[:200], full[len(full)-200:])
	}
	model := out.Output.ForModel()
	if len(model) > sandbox.ModelHeadBytes+sandbox.ModelTailBytes+300 || !strings.Contains(model, "FIRST") || !strings.HasSuffix(model, "LAST\n") {
		t.Fatalf("model view of %d bytes", len(model))
	}
	if !strings.Contains(model, fmt.Sprintf("cut from the middle of %d bytes of output", out.Output.Bytes)) {
		t.Errorf("the model view does not say what was cut: %q", model[sandbox.ModelHeadBytes-100:sandbox.ModelHeadBytes+300])
	}
}

func TestTheSandboxSeesNoSecretsAndHasLimits(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"inspect": "env; cat /proc/self/limits; ls /etc; ls /"}, map[string]string{".env": "SECRET=1\n", "config/.env.local": "SECRET=2\n", "keys/server.pem": "-----\n"})
	out := f.run(t, "inspect", time.Minute)
	text := out.Output.Full()
	for _, want := range []string{"Max processes             256", "Max cpu time              120", "Max data size             2147483648", "Max file size             268435456", "HOME=/tmp", "CI=true"} {
		if !strings.Contains(text, want) {
			t.Errorf("sandbox lacks %q:\n%s", want, text)
		}
	}
	for _, secret := range []string{"shadow", "DATABASE_URL", "OPENAI", "S3_", "root"} {
		if strings.Contains(text, secret) {
			t.Errorf("the sandbox sees %q:\n%s", secret, text)
		}
	}
	for _, p := range []string{".env", "config/.env.local", "keys/server.pem"} {
		if _, err := os.Stat(filepath.Join(f.ws.Dir(), p)); err == nil {
			t.Errorf("sensitive file %s is in the workspace", p)
		}
	}
}

// TestSyncIsIncremental: only what changed is written, what was deleted is
// removed, what a command changed is put back.
func TestSyncIsIncremental(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"scribble": "echo changed > src/greet.ts && echo new > out.txt"}, map[string]string{"docs/a.md": "a\n"})
	st, err := f.ws.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := len(sandboxtest.Fixture()) + 1
	if st.Written != n || st.Files != n {
		t.Fatalf("first sync: %+v, want %d files written", st, n)
	}
	ctx := t.Context()
	if _, err := f.store.Write(ctx, project, "src/extra.ts", []byte("export const y = 2\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Delete(ctx, project, "docs/a.md"); err != nil {
		t.Fatal(err)
	}
	if st, err = f.ws.Sync(ctx); err != nil || st.Written != 1 || st.Removed != 1 || st.Files != n {
		t.Fatalf("second sync: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(f.ws.Dir(), "docs/a.md")); err == nil {
		t.Error("docs/a.md is still in the workspace")
	}
	if st, err = f.ws.Sync(ctx); err != nil || st.Written != 0 || st.Removed != 0 {
		t.Fatalf("sync without changes: %+v, %v", st, err)
	}
	out := f.run(t, "scribble", time.Minute)
	if out.Sync.Written != 0 {
		t.Errorf("run sync: %+v", out.Sync)
	}
	if st, err = f.ws.Sync(ctx); err != nil || st.Written != 1 {
		t.Fatalf("sync after a command changed a file: %+v, %v", st, err)
	}
	want := sandboxtest.Fixture()["src/greet.ts"]
	if b, _ := os.ReadFile(filepath.Join(f.ws.Dir(), "src/greet.ts")); string(b) != want {
		t.Errorf("src/greet.ts = %q", b)
	}
	if _, err := os.Stat(filepath.Join(f.ws.Dir(), "out.txt")); err != nil {
		t.Errorf("a command's own output was removed: %v", err)
	}
	dir := f.ws.Dir()
	if err := f.ws.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after Close: %v", err)
	}
	if _, err := f.ws.Run(ctx, "typecheck", 0); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("run after close: %v", err)
	}
}

func TestNewLines(t *testing.T) {
	t.Parallel()
	before := "src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'.\nFound 1 error in 0.8s\n"
	for _, tc := range []struct {
		name, after string
		want        []string
	}{
		{"SameProblemMoved", "src/a.ts(9,5): error TS2322: Type 'string' is not assignable to type 'number'.\nFound 1 error in 1.2s\n", nil},
		{"NewProblem", "src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'.\nsrc/b.ts(1,1): error TS2304: Cannot find name 'x'.\n",
			[]string{"src/b.ts(1,1): error TS2304: Cannot find name 'x'."}},
		{"Fewer", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := sandbox.NewLines(before, tc.after)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("NewLines = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHostKernelStateMasked: the sandbox's /proc is its own PID
// namespace's, but some of its files describe the whole host (every
// CPU's timers with the host's process names and pids, the kernel's
// keys, its ACPI and interrupt tables): a command reads them empty, as a
// container's runtime masks them.
func TestHostKernelStateMasked(t *testing.T) {
	t.Parallel()
	var script strings.Builder
	for _, p := range []string{"/proc/timer_list", "/proc/keys", "/proc/interrupts", "/proc/sched_debug", "/proc/kcore", "/proc/latency_stats", "/proc/timer_stats"} {
		fmt.Fprintf(&script, "if [ -e %[1]s ]; then printf '%%s:' %[1]s; head -c 200 %[1]s 2>/dev/null | wc -c; fi; ", p)
	}
	for _, d := range []string{"/proc/acpi", "/proc/asound", "/proc/scsi"} {
		fmt.Fprintf(&script, "if [ -d %[1]s ]; then printf '%%s:' %[1]s; ls -A %[1]s | wc -l; fi; ", d)
	}
	script.WriteString("echo done")
	f := setup(t, map[string]string{"peek": script.String()}, nil)
	out := f.run(t, "peek", time.Minute)
	text := out.Output.Full()
	if !strings.Contains(text, "done") {
		t.Fatalf("%s\n%s", out.Summary(), text)
	}
	for _, line := range strings.Split(text, "\n") {
		path, n, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.HasPrefix(path, "/") && strings.TrimSpace(n) != "0" {
			t.Errorf("%s reads %s bytes or entries in the sandbox, want none", path, strings.TrimSpace(n))
		}
	}
}
