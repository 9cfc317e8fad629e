package projectctx

import (
	"reflect"
	"testing"

	"github.com/agentworker/agentworker/storage"
)

func TestFindRules(t *testing.T) {
	t.Parallel()
	listing := func(paths ...string) []storage.FileInfo {
		var out []storage.FileInfo
		for _, p := range paths {
			out = append(out, storage.FileInfo{Path: p})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		paths     []string
		fallbacks []string
		want      Rules
	}{
		{"override wins", []string{"AGENTS.md", "AGENTS.override.md", "CLAUDE.md"}, DefaultRuleFallbacks, Rules{"": "AGENTS.override.md"}},
		{"agents over fallback", []string{"web/CLAUDE.md", "web/AGENTS.md"}, DefaultRuleFallbacks, Rules{"web": "web/AGENTS.md"}},
		{"fallback alone", []string{"web/CLAUDE.md"}, DefaultRuleFallbacks, Rules{"web": "web/CLAUDE.md"}},
		{"fallbacks off", []string{"web/CLAUDE.md"}, nil, Rules{}},
		{"fallbacks in order", []string{"b.md", "a.md"}, []string{"a.md", "b.md"}, Rules{"": "a.md"}},
		{"sensitive and excluded folders never count", []string{".aws/AGENTS.md", "node_modules/x/AGENTS.md", "app/AGENTS.md"}, nil, Rules{"app": "app/AGENTS.md"}},
		{"a fallback that is a secret never counts", []string{".env"}, []string{".env"}, Rules{}},
		{"other names", []string{"agents.md", "docs/AGENTS.txt"}, nil, Rules{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := FindRules(listing(tc.paths...), RuleNames(tc.fallbacks)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FindRules = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRulesAlong(t *testing.T) {
	t.Parallel()
	r := Rules{"": "AGENTS.md", "web": "web/AGENTS.md", "web/deep": "web/deep/AGENTS.md", "webx": "webx/AGENTS.md"}
	for _, tc := range []struct {
		path  string
		isDir bool
		want  []string
	}{
		{"web/deep/a.js", false, []string{"web", "web/deep"}},
		{"web/deep", true, []string{"web", "web/deep"}},
		{"web/deep", false, []string{"web"}},
		{"webx/a.js", false, []string{"webx"}},
		{"a.js", false, nil},
		{"", true, nil},
	} {
		if got := r.Along(tc.path, tc.isDir); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Along(%q, %v) = %v, want %v", tc.path, tc.isDir, got, tc.want)
		}
	}
}

func TestCutKeepsWholeCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text    string
		room    int
		want    string
		wantCut bool
	}{
		{"abc", 3, "abc", false},
		{"abc", 2, "ab", true},
		{"aé", 2, "a", true}, // é is two bytes
		{"aé", 3, "aé", false},
		{"abc", 0, "", true},
		{"abc", -1, "", true},
	} {
		if got, cut := Cut(tc.text, tc.room); got != tc.want || cut != tc.wantCut {
			t.Errorf("Cut(%q, %d) = %q, %v; want %q, %v", tc.text, tc.room, got, cut, tc.want, tc.wantCut)
		}
	}
}
