package projectctx

import (
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentworker/agentworker/storage"
)

// RulesBudget is the bytes of rules files the agent is given in one task,
// all folders together (as Codex's project_doc_max_bytes).
const RulesBudget = 32 << 10

// Rules file names of a folder, first found wins.
const (
	RulesOverride = "AGENTS.override.md"
	RulesFile     = "AGENTS.md"
)

// DefaultRuleFallbacks are the names tried after AGENTS.md.
var DefaultRuleFallbacks = []string{"CLAUDE.md"}

// RuleNames is the order in which a folder's rules file is looked for.
func RuleNames(fallbacks []string) []string {
	names := []string{RulesOverride, RulesFile}
	for _, f := range fallbacks {
		if f = strings.TrimSpace(f); f != "" && f != RulesOverride && f != RulesFile && !strings.Contains(f, "/") {
			names = append(names, f)
		}
	}
	return names
}

// Rules maps each folder ("" for the root) to the one rules file that
// counts there.
type Rules map[string]string

// FindRules picks each folder's rules file from a listing: the first of
// names it holds. A file the sensitive-file policy refuses never counts.
func FindRules(listing []storage.FileInfo, names []string) Rules {
	rank := map[string]int{}
	for i, n := range names {
		rank[n] = i + 1
	}
	best := map[string]int{}
	r := Rules{}
	for _, f := range listing {
		dir, base := path.Split(f.Path)
		dir = strings.TrimSuffix(dir, "/")
		k := rank[base]
		if k == 0 || excluded(f.Path) || storage.CheckSensitive(f.Path) != nil {
			continue
		}
		if b, ok := best[dir]; !ok || k < b {
			best[dir], r[dir] = k, f.Path
		}
	}
	return r
}

// Along returns the folders below the root, shallowest first, that hold
// a rules file and contain p (a project-relative file or folder path).
func (r Rules) Along(p string, isDir bool) []string {
	p = strings.Trim(p, "/")
	if p == "" || p == "." {
		return nil
	}
	segs := strings.Split(p, "/")
	if !isDir {
		segs = segs[:len(segs)-1]
	}
	var dirs []string
	for i := range segs {
		d := strings.Join(segs[:i+1], "/")
		if _, ok := r[d]; ok {
			dirs = append(dirs, d)
		}
	}
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") < strings.Count(dirs[j], "/") })
	return dirs
}

// Cut keeps at most room bytes of text, ending on a whole UTF-8
// character, and says whether it cut.
func Cut(text string, room int) (string, bool) {
	if room < 0 {
		room = 0
	}
	if len(text) <= room {
		return text, false
	}
	for room > 0 && !utf8.RuneStart(text[room]) {
		room--
	}
	return text[:room], true
}
