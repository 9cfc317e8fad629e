package sandbox_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentworker/agentworker/sandbox"
)

// TestInstallRefusesWhatNpmCouldReadOtherwise: a package.json or lockfile
// the install check could read otherwise than npm — a field of the wrong
// type (which once made the check skip the file), a key in another case
// (which encoding/json took for npm's), a key twice — is refused before npm
// runs, with a message saying what to fix; the loopback server its
// dependencies name sees no request.
func TestInstallRefusesWhatNpmCouldReadOtherwise(t *testing.T) {
	t.Parallel()
	host, hits := countingServer(t)
	git := `"git+http://` + host + `/outer.git"`
	pkg := func(fields string) string {
		return `{"name": "p", "version": "1.0.0", "scripts": {"typecheck": "true"}, ` + fields + `}`
	}
	lock := func(entry string) string {
		return `{"name": "p", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": {
			"": {"name": "p", "version": "1.0.0", "devDependencies": {"outer": "1.0.0"}}, ` + entry + `}}`
	}
	const malformed = "could be read otherwise than npm reads it"
	for _, tc := range []struct {
		name, pkg, lock, want string
	}{
		{"WrongTypeBesideIt", pkg(`"DevDependencies": 1, "devDependencies": {"outer": ` + git + `}`), "", "a git repository"},
		{"OtherCaseShadows", pkg(`"devDependencies": {"outer": ` + git + `}, "DEVDEPENDENCIES": {"outer": "1.0.0"}`), "", "a git repository"},
		{"WrongType", pkg(`"devDependencies": {"outer": "1.0.0"}, "optionalDependencies": 5`), "", malformed},
		{"DuplicateKey", pkg(`"devDependencies": {"outer": ` + git + `, "outer": "1.0.0"}`), "", malformed},
		{"LockOtherCaseShadows", pkg(`"devDependencies": {"outer": "1.0.0"}`),
			lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "http://` + host + `/outer/-/outer-1.0.0.tgz", "Resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz"}`),
			"resolved outside the registry"},
		{"LockWrongType", pkg(`"devDependencies": {"outer": "1.0.0"}`),
			lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz", "link": "no"}`), malformed},
		{"LockDuplicateKey", pkg(`"devDependencies": {"outer": "1.0.0"}`),
			lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "http://` + host + `/outer/-/outer-1.0.0.tgz", "resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz"}`), malformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := runTypecheck(t, tc.pkg, tc.lock)
			if out.Stage != sandbox.StageInstall || out.Passed() || !strings.Contains(out.Refused, tc.want) ||
				!strings.HasPrefix(out.Summary(), "the dependencies were not installed: ") {
				t.Fatalf("outcome: stage %s, refused %q, summary %q\n%s", out.Stage, out.Refused, out.Summary(), out.Output.Full())
			}
			if n := hits.Load(); n > 0 {
				t.Fatalf("the install reached the loopback server %d times", n)
			}
		})
	}
}

// countingServer is a loopback server that counts its requests: what a
// dependency names there must never be fetched.
func countingServer(t *testing.T) (host string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), hits
}

// runTypecheck runs the script typecheck of a project of the fixture with
// package.json pkg and the lockfile lock (none when empty).
func runTypecheck(t *testing.T, pkg, lock string) sandbox.Outcome {
	t.Helper()
	f := setup(t, nil, map[string]string{"package.json": pkg, "package-lock.json": lock})
	if lock == "" {
		if err := f.store.Delete(t.Context(), project, "package-lock.json"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.ws.Run(t.Context(), "typecheck", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
