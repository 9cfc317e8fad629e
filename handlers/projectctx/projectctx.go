// Package projectctx builds what the agent is told about a project before
// its first call: a capped file list, the project type (react, vue,
// vanilla, go or unknown) inferred from package.json and the files, the
// entry points and the most recently modified files.
package projectctx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/agentworker/agentworker/storage"
)

// Project types.
const (
	TypeReact   = "react"
	TypeVue     = "vue"
	TypeVanilla = "vanilla"
	TypeGo      = "go"
	TypeUnknown = "unknown"
)

// Files is what the builder reads.
type Files interface {
	List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error)
	Read(ctx context.Context, projectID, path string) ([]byte, storage.FileInfo, error)
}

// Summary is the project context of a task.
type Summary struct {
	FileCount   int      // files in the project, excluded directories aside
	Files       []string // paths, at most Options.MaxFiles
	Truncated   bool     // Files is cut
	Type        string   // TypeReact, ...
	TypeScript  bool
	Tooling     []string // e.g. vite, tailwind, next
	EntryPoints []string
	RecentFiles []string // most recently modified first
	Rules       Rules    // each folder's rules file, by Options.RuleNames
	// Documents are the project's documents in the listing (FindDocuments),
	// uncapped by MaxFiles.
	Documents []storage.FileInfo
	listed    map[string]bool
}

// Has says whether the listing held the file p (excluded folders aside).
func (s Summary) Has(p string) bool { return s.listed[p] }

// Options bound the summary.
type Options struct {
	// MaxFiles caps Files. Defaults to 200.
	MaxFiles int
	// MaxRecent caps RecentFiles. Defaults to 10.
	MaxRecent int
	// RuleNames are the rules file names of a folder, first found wins
	// (RuleNames(fallbacks)). Empty: no rules are looked for.
	RuleNames []string
}

var excludedDirs = map[string]bool{"node_modules": true, ".git": true, "dist": true, "build": true, ".next": true, "coverage": true}

var entryCandidates = []string{
	"index.html", "src/main.tsx", "src/main.ts", "src/main.jsx", "src/main.js",
	"src/index.tsx", "src/index.ts", "src/index.jsx", "src/index.js",
	"src/App.tsx", "src/App.jsx", "src/App.vue", "src/App.js",
	"app/page.tsx", "pages/index.tsx", "main.go", "index.js", "main.js",
}

// Build reads the project's listing (and its package.json, if any) and
// summarises it. It makes one List call and at most one Read.
func Build(ctx context.Context, files Files, projectID string, o Options) (Summary, error) {
	if o.MaxFiles <= 0 {
		o.MaxFiles = 200
	}
	if o.MaxRecent <= 0 {
		o.MaxRecent = 10
	}
	all, err := files.List(ctx, projectID, "")
	if err != nil {
		return Summary{}, fmt.Errorf("build project context: list: %w", err)
	}
	var kept []storage.FileInfo
	exists := map[string]bool{}
	for _, f := range all {
		if excluded(f.Path) {
			continue
		}
		kept = append(kept, f)
		exists[f.Path] = true
	}
	s := Summary{FileCount: len(kept), Type: TypeUnknown, Rules: FindRules(kept, o.RuleNames), Documents: FindDocuments(kept, o.RuleNames), listed: exists}
	for i, f := range kept {
		if i == o.MaxFiles {
			s.Truncated = true
			break
		}
		s.Files = append(s.Files, f.Path)
	}
	byTime := append([]storage.FileInfo{}, kept...)
	sort.SliceStable(byTime, func(i, j int) bool { return byTime[i].ModTime.After(byTime[j].ModTime) })
	for _, f := range byTime[:min(len(byTime), o.MaxRecent)] {
		s.RecentFiles = append(s.RecentFiles, f.Path)
	}
	for _, c := range entryCandidates {
		if exists[c] {
			s.EntryPoints = append(s.EntryPoints, c)
		}
	}
	for _, f := range kept {
		if strings.HasPrefix(f.Path, "cmd/") && path.Base(f.Path) == "main.go" {
			s.EntryPoints = append(s.EntryPoints, f.Path)
		}
		switch path.Ext(f.Path) {
		case ".ts", ".tsx":
			s.TypeScript = true
		}
	}
	s.TypeScript = s.TypeScript || exists["tsconfig.json"]

	deps := map[string]bool{}
	if exists["package.json"] {
		content, _, err := files.Read(ctx, projectID, "package.json")
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return Summary{}, fmt.Errorf("build project context: read package.json: %w", err)
		}
		var pj struct {
			Main            string            `json:"main"`
			Dependencies    map[string]string `json:"dependencies"`
			DevDependencies map[string]string `json:"devDependencies"`
		}
		if json.Unmarshal(content, &pj) == nil {
			for k := range pj.Dependencies {
				deps[k] = true
			}
			for k := range pj.DevDependencies {
				deps[k] = true
			}
			if pj.Main != "" && exists[path.Clean(pj.Main)] && !contains(s.EntryPoints, path.Clean(pj.Main)) {
				s.EntryPoints = append(s.EntryPoints, path.Clean(pj.Main))
			}
		}
	}
	switch {
	case deps["react"] || deps["next"] || deps["preact"]:
		s.Type = TypeReact
	case deps["vue"] || deps["nuxt"]:
		s.Type = TypeVue
	case exists["go.mod"]:
		s.Type = TypeGo
	case exists["package.json"] || exists["index.html"]:
		s.Type = TypeVanilla
	case hasExt(kept, ".tsx", ".jsx"):
		s.Type = TypeReact
	case hasExt(kept, ".vue"):
		s.Type = TypeVue
	case hasExt(kept, ".go"):
		s.Type = TypeGo
	case hasExt(kept, ".html", ".js", ".css"):
		s.Type = TypeVanilla
	}
	for _, tool := range []string{"vite", "next", "tailwindcss", "typescript", "webpack", "jest", "vitest"} {
		if deps[tool] {
			s.Tooling = append(s.Tooling, tool)
		}
	}
	return s, nil
}

func excluded(p string) bool {
	parts := strings.Split(p, "/")
	for _, d := range parts[:len(parts)-1] {
		if excludedDirs[d] {
			return true
		}
	}
	return false
}

func hasExt(files []storage.FileInfo, exts ...string) bool {
	for _, f := range files {
		for _, e := range exts {
			if path.Ext(f.Path) == e {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
