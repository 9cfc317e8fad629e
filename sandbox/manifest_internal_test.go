package sandbox

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestChecksReadAsNpmReads: package.json and the lockfile are checked as npm
// reads them, and refused when they could be read another way: invalid
// JSON, a key twice, a field of the wrong type. A key in another case is
// not npm's key (npm ignores "DevDependencies"), so it neither hides nor
// stands in for the real one.
func TestChecksReadAsNpmReads(t *testing.T) {
	t.Parallel()
	const git = `"git+http://127.0.0.1:1/outer.git"`
	const registry = "https://registry.npmjs.org/"
	lock := func(entry string) string {
		return `{"name": "p", "lockfileVersion": 3, "packages": {"": {"name": "p", "devDependencies": {"outer": "1.0.0"}}, ` + entry + `}}`
	}
	tests := []struct {
		name, pkg, lock string
		// want: "" for accepted, else a phrase of the refusal.
		want string
		// manifest: the refusal is a *ManifestError (else a *SourceError).
		manifest bool
	}{
		{name: "Plain", pkg: `{"devDependencies": {"outer": "^1.0.0"}}`},
		{name: "ByteOrderMark", pkg: "\ufeff" + `{"devDependencies": {"outer": "^1.0.0"}}`},
		{name: "OtherCaseIgnored", pkg: `{"DevDependencies": {"outer": ` + git + `}, "devDependencies": {"outer": "1.0.0"}}`},
		{name: "OtherCaseNumber", pkg: `{"DevDependencies": 1, "devDependencies": {"outer": ` + git + `}}`, want: "a git repository"},
		{name: "OtherCaseShadows", pkg: `{"devDependencies": {"outer": ` + git + `}, "DEVDEPENDENCIES": {"outer": "1.0.0"}}`, want: "a git repository"},
		{name: "DuplicateDependency", pkg: `{"devDependencies": {"outer": ` + git + `, "outer": "1.0.0"}}`, want: `.devDependencies has the key "outer" twice`, manifest: true},
		{name: "DuplicateField", pkg: `{"devDependencies": {"outer": ` + git + `}, "devDependencies": {"outer": "1.0.0"}}`, want: `it has the key "devDependencies" twice`, manifest: true},
		{name: "DuplicateElsewhere", pkg: `{"name": "p", "name": "q"}`, want: `has the key "name" twice`, manifest: true},
		{name: "WrongTypeNumber", pkg: `{"optionalDependencies": 5, "dependencies": {"a": "1.0.0"}}`, want: ".optionalDependencies must be an object of version strings, not a number", manifest: true},
		{name: "WrongTypeNull", pkg: `{"dependencies": null}`, want: "not null", manifest: true},
		{name: "WrongTypeArray", pkg: `{"peerDependencies": ["a"]}`, want: "not an array", manifest: true},
		{name: "SpecNotString", pkg: `{"dependencies": {"a": 1}}`, want: "not a version string"},
		{name: "OverridesWrongType", pkg: `{"overrides": 1}`, want: ".overrides must be", manifest: true},
		{name: "OverridesNestedWrongType", pkg: `{"overrides": {"a": {"b": true}}}`, want: `.overrides.a.b must be`, manifest: true},
		{name: "NotAnObject", pkg: `[]`, want: "it must be an object", manifest: true},
		{name: "InvalidJSON", pkg: `{"dependencies": {"a": "1.0.0"},}`, want: "not valid JSON", manifest: true},
		{name: "TrailingText", pkg: `{} {"dependencies": {"a": ` + git + `}}`, want: "it has text after the JSON document", manifest: true},
		{name: "Empty", pkg: ``, want: "not valid JSON", manifest: true},
		{name: "TooDeep", pkg: `{"overrides": ` + strings.Repeat(`{"a": `, 600) + `"1"` + strings.Repeat(`}`, 600) + `}`, want: "nests deeper than", manifest: true},
		{name: "LockPlain", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz"}`)},
		{name: "LockOtherCaseShadows", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "http://127.0.0.1:1/outer.tgz", "Resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz"}`),
			want: "resolved outside the registry"},
		{name: "LockWrongType", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"version": "1.0.0", "resolved": "http://127.0.0.1:1/outer.tgz"}, "node_modules/zzz": {"link": "yes"}`),
			want: "resolved outside the registry"}, // the entries are checked in order
		{name: "LockLinkNotBool", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"version": "1.0.0", "link": "yes"}`), want: `.packages["node_modules/outer"].link must be true or false, not a string`, manifest: true},
		{name: "LockResolvedNotString", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"version": "1.0.0", "resolved": ["http://127.0.0.1:1/outer.tgz"]}`), want: "resolved must be a string", manifest: true},
		{name: "LockDuplicate", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: lock(`"node_modules/outer": {"resolved": "http://127.0.0.1:1/outer.tgz", "resolved": "https://registry.npmjs.org/outer/-/outer-1.0.0.tgz"}`),
			want: `.packages["node_modules/outer"] has the key "resolved" twice`, manifest: true},
		{name: "LockPackagesWrongType", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: `{"lockfileVersion": 3, "packages": []}`, want: ".packages must be an object", manifest: true},
		{name: "LockV1WrongType", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: `{"lockfileVersion": 1, "dependencies": {"outer": {"version": "1.0.0", "dependencies": {"inner": {"resolved": 7}}}}}`,
			want: `.dependencies.outer.dependencies.inner.resolved must be a string`, manifest: true},
		{name: "LockV1Nested", pkg: `{"devDependencies": {"outer": "1.0.0"}}`,
			lock: `{"lockfileVersion": 1, "dependencies": {"outer": {"version": "1.0.0", "dependencies": {"inner": {"version": "1.0.0", "resolved": "http://127.0.0.1:1/i.tgz"}}}}}`,
			want: "resolved outside the registry"},
		{name: "LockNotJSON", pkg: `{"devDependencies": {"outer": "1.0.0"}}`, lock: `{"packages": {`, want: "package-lock.json could be read otherwise than npm reads it", manifest: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lockName := ""
			if tt.lock != "" {
				lockName = "package-lock.json"
			}
			err := checkSources([]byte(tt.pkg), lockName, []byte(tt.lock), registry)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var me *ManifestError
			var se *SourceError
			switch {
			case err == nil:
				t.Fatalf("accepted, want refused with %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("refused with %q, want %q", err, tt.want)
			case tt.manifest && !errors.As(err, &me), !tt.manifest && !errors.As(err, &se):
				t.Fatalf("refused with %T %v, want manifest %v", err, err, tt.manifest)
			}
		})
	}
}

// TestChecksAcceptTheFixture: the TypeScript fixture's package.json and
// lockfile, as npm wrote them, pass.
func TestChecksAcceptTheFixture(t *testing.T) {
	t.Parallel()
	const dir = "../testing/sandboxtest/fixture/"
	pkg, err := os.ReadFile(dir + "package.json")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(dir + "package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSources(pkg, "package-lock.json", lock, "https://registry.npmjs.org/"); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseManifest: the manifest parser never panics, and what it accepts
// is valid JSON.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, "x", null, true]}`, `{"a": 1, "a": 2}`, `{"a": {"b": {}}}`, `[`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseManifest("package.json", data)
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error %T %v is not a *ManifestError", err, err)
			}
			return
		}
		if !json.Valid([]byte(strings.TrimPrefix(string(data), "\ufeff"))) {
			t.Fatalf("accepted %q (%v), which is not valid JSON", data, v)
		}
	})
}
