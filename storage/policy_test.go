package storage_test

import (
	"errors"
	"testing"

	"github.com/agentworker/agentworker/storage"
)

func TestCheckSensitive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path      string
		sensitive bool
	}{
		{".env", true}, {".env.local", true}, {"app/.env.production", true}, {".ENV", true},
		{"certs/server.pem", true}, {"tls/server.key", true}, {"client.p12", true}, {"client.PFX", true},
		{"id_rsa", true}, {"home/.ssh/id_rsa.pub", true}, {"id_ed25519", true}, {".ssh/config", true},
		{".netrc", true}, {".npmrc", true}, {".git-credentials", true}, {".aws/credentials", true},
		{"config/master.key", true}, {"infra/prod.tfvars", true}, {"keystore.jks", true},
		{".git/config", true}, {"vendor/lib/.git/config", true}, {".GIT/CONFIG", true}, {"web/.npmrc", true},
		{"home/.netrc", true}, {".pypirc", true}, {"home/.aws/credentials", true}, {"id_ed25519.pub", true},
		{"keys/id_ecdsa_sk", true}, {"id_rsa.old", true}, {"passwords.kdbx", true}, {".cargo/credentials.toml", true},
		{"secrets.json", true}, {"config/Secrets.JSON", true}, {".yarnrc.yml", true}, {"web/.yarnrc", true},
		{"infra/terraform.tfstate", true}, {"terraform.tfstate.backup", true}, {"home/.netrc", true}, {"pkg/.pypirc", true},
		// Compatibility forms are compared as what they render as (NFKC):
		// full-width letters, a ligature, full-width punctuation.
		{".ｅnv", true}, {"ｉｄ_ｒｓａ", true}, {"app/．env", true}, {"ﬁle.pem", true}, {"server．ｋｅｙ", true}, {"secrets．json", true},
		{"config", false}, {"git/config", false}, {".github/config.yml", false}, {".git/HEAD", false}, {"src/.gitconfig.md", false},
		{"main.go", false}, {"src/environment.ts", false}, {"docs/keys.md", false}, {"README.md", false},
		{"env/config.yaml", false}, {"src/monkey.go", false}, {"keyboard.txt", false}, {"pem/notes.txt", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			err := storage.CheckSensitive(tt.path)
			if got := errors.Is(err, storage.ErrSensitive); got != tt.sensitive {
				t.Errorf("CheckSensitive(%q) = %v, want sensitive %v", tt.path, err, tt.sensitive)
			}
		})
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		patterns []string
		path     string
		allowed  bool
	}{
		{"EmptyAllowsAll", nil, "any/where.go", true},
		{"DoubleStarUnder", []string{"src/components/**"}, "src/components/Login.vue", true},
		{"DoubleStarDeep", []string{"src/**"}, "src/a/b/c.go", true},
		{"DoubleStarOutside", []string{"src/components/**"}, "src/main.go", false},
		{"StarOneSegment", []string{"docs/*.md"}, "docs/intro.md", true},
		{"StarNotDeeper", []string{"docs/*.md"}, "docs/a/intro.md", false},
		{"AnyDirExt", []string{"**/*.go"}, "main.go", true},
		{"AnyDirExtDeep", []string{"**/*.go"}, "a/b/main.go", true},
		{"AnyDirExtOther", []string{"**/*.go"}, "a/b/main.ts", false},
		{"Exact", []string{"README.md"}, "README.md", true},
		{"SecondPattern", []string{"src/**", "tests/**"}, "tests/x_test.go", true},
		{"PrefixIsNotDir", []string{"src/**"}, "srcx/a.go", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := storage.NewScope(tt.patterns)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Check(tt.path)
			if got := err == nil; got != tt.allowed {
				t.Errorf("%v.Check(%q) = %v, want allowed %v", tt.patterns, tt.path, err, tt.allowed)
			}
			if err != nil && !errors.Is(err, storage.ErrOutOfScope) {
				t.Errorf("error %v does not wrap ErrOutOfScope", err)
			}
		})
	}
	for _, bad := range []string{"../x/**", "/abs/**", "a/b**", "[", ""} {
		if _, err := storage.NewScope([]string{bad}); err == nil {
			t.Errorf("NewScope(%q) accepted a bad pattern", bad)
		}
	}
}

func TestCheckSize(t *testing.T) {
	t.Parallel()
	if err := storage.CheckSize("a", storage.DefaultMaxWriteBytes, storage.DefaultMaxWriteBytes); err != nil {
		t.Error(err)
	}
	if err := storage.CheckSize("a", storage.DefaultMaxWriteBytes+1, storage.DefaultMaxWriteBytes); !errors.Is(err, storage.ErrTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
}

// TestScopeWithin: a scope narrowed by another allows only what both allow,
// whichever is empty (empty allows everything).
func TestScopeWithin(t *testing.T) {
	t.Parallel()
	scope := func(p ...string) *storage.Scope {
		s, err := storage.NewScope(p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name         string
		inner, outer *storage.Scope
		path         string
		want         bool
	}{
		{"InnerEmpty", scope(), scope("docs/**"), "README.md", false},
		{"InnerEmptyInside", scope(), scope("docs/**"), "docs/a.md", true},
		{"InnerWider", scope("**"), scope("docs/**"), "src/a.ts", false},
		{"InnerNarrower", scope("docs/api/*"), scope("docs/**"), "docs/guide.md", false},
		{"Both", scope("docs/api/*"), scope("docs/**"), "docs/api/a.md", true},
		{"OuterEmpty", scope("src/**"), scope(), "docs/a.md", false},
		{"NilOuter", scope("src/**"), nil, "src/a.ts", true},
		{"NilInner", nil, scope("src/**"), "docs/a.md", false},
		{"ThreeDeep", scope().Within(scope("src/**")), scope("src/app/**"), "src/lib/a.ts", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.inner.Within(tt.outer).Check(tt.path)
			if got := err == nil; got != tt.want {
				t.Errorf("Check(%q) = %v, want allowed=%v", tt.path, err, tt.want)
			}
		})
	}
}
