package verify_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/storage"
)

// edit is one change of a case: a replacement in a file (old → new), a
// new file (old empty), or a deletion.
type edit struct {
	path, old, new string
	del            bool
}

// projectCase is an edit of a multi-file project and what the checks must
// say about it: whether it blocks the build's finish, which problems it
// introduced, how many it found there before.
type projectCase struct {
	name, project string
	edits         []edit
	blocks        bool
	introduced    []string // substrings of the introduced problems, one each
	preexisting   int
	unchecked     int
}

// projectCases are edits of the projects in testdata/projects, laid out
// like the templates they follow: create-vite's react-ts with shadcn/ui's
// "@/*" paths and project references; a turborepo with npm workspaces,
// shared tsconfigs extended by package name and by path, package exports
// and imports; a Node ESM service in TypeScript (".js" names of ".ts"
// sources, node: builtins, baseUrl, JSON imports, "#" imports).
var projectCases = []projectCase{
	{name: "ViteNewComponentWithAliases", project: "vite-react-ts", edits: []edit{{path: "src/components/ProductCard.tsx",
		new: "import type { Product } from '@/lib/types'\nimport { Button } from '@/components/ui/button'\nimport { cn } from '../lib/utils'\n\nexport function ProductCard({ p }: { p: Product }) {\n  return <Button className={cn('card')}>{p.name}</Button>\n}\n"}}},
	{name: "ViteBrokenAliasImport", project: "vite-react-ts", blocks: true, introduced: []string{`"@/components/ui/dialog"`},
		edits: []edit{{path: "src/App.tsx", old: "import './App.css'\n", new: "import './App.css'\nimport { Dialog } from '@/components/ui/dialog'\n"},
			{path: "src/App.tsx", old: "<h1>Vite + React</h1>", new: "<h1>Vite + React</h1><Dialog />"}}},
	{name: "ViteBrokenTypeOnlyImport", project: "vite-react-ts", blocks: true, introduced: []string{`"./props"`},
		edits: []edit{{path: "src/components/ui/button.tsx", old: "import { cn } from \"@/lib/utils\"\n", new: "import { cn } from \"@/lib/utils\"\nimport type { Extra } from \"./props\"\n"}}},
	{name: "ViteUnusedImportStillResolved", project: "vite-react-ts", blocks: true, introduced: []string{`"@/lib/missing"`},
		edits: []edit{{path: "src/lib/utils.ts", old: "import { twMerge } from \"tailwind-merge\"\n", new: "import { twMerge } from \"tailwind-merge\"\nimport { unused } from \"@/lib/missing\"\n"}}},
	{name: "ViteEditNextToPreexistingBrokenImport", project: "vite-react-ts", preexisting: 1,
		edits: []edit{{path: "src/legacy/report.ts", old: "export const title = 'Report'", new: "export const title = 'Monthly report'"}}},
	{name: "ViteBundlerAliasNotChecked", project: "vite-react-ts", unchecked: 1,
		edits: []edit{{path: "src/App.tsx", old: "import './App.css'\n", new: "import './App.css'\nimport starUrl from 'icons/star.svg'\n"}}},
	{name: "ViteUndeclaredPackage", project: "vite-react-ts", blocks: true, introduced: []string{`"lodash/debounce"`},
		edits: []edit{{path: "src/lib/utils.ts", old: "import { twMerge } from \"tailwind-merge\"\n", new: "import { twMerge } from \"tailwind-merge\"\nimport debounce from \"lodash/debounce\"\nexport { debounce }\n"}}},
	{name: "ViteAssetsPublicAndCSS", project: "vite-react-ts",
		edits: []edit{{path: "src/main.tsx", old: "import './index.css'\n", new: "import './index.css'\nimport './App.css'\nimport logo from './assets/react.svg?url'\nimport vite from '/vite.svg'\nconsole.log(logo, vite)\n"}}},
	{name: "MonorepoWorkspaceSubpathExported", project: "monorepo",
		edits: []edit{{path: "apps/web/app/page.tsx", old: "import { site } from \"@/lib/site\";\n", new: "import { site } from \"@/lib/site\";\nimport { Card } from \"@repo/ui/card\";\nexport { Card };\n"}}},
	{name: "MonorepoSubpathNotExported", project: "monorepo", blocks: true, introduced: []string{`does not export "./src/button"`},
		edits: []edit{{path: "apps/web/app/page.tsx", old: "import { Button } from \"@repo/ui/button\";", new: "import { Button } from \"@repo/ui/src/button\";"}}},
	{name: "MonorepoPackageImports", project: "monorepo",
		edits: []edit{{path: "packages/utils/src/index.ts", old: "import { clamp } from \"#internal/math\";\n", new: "import { clamp } from \"#internal/math\";\nimport { thousands } from \"#internal/format\";\nexport { thousands };\n"}}},
	{name: "MonorepoPackageImportMissing", project: "monorepo", blocks: true, introduced: []string{`"#internal/round"`},
		edits: []edit{{path: "packages/utils/src/index.ts", old: "import { clamp } from \"#internal/math\";\n", new: "import { clamp } from \"#internal/math\";\nimport { round } from \"#internal/round\";\nexport { round };\n"}}},
	{name: "MonorepoExtendedBaseUrlPaths", project: "monorepo", preexisting: 1,
		edits: []edit{{path: "apps/docs/src/index.tsx", old: "href=\"/docs\"", new: "href=\"/docs/intro\""}}},
	{name: "MonorepoDeleteBreaksDependent", project: "monorepo", blocks: true, introduced: []string{`"#internal/math"`},
		edits: []edit{{path: "packages/utils/src/internal/math.ts", del: true}}},
	{name: "MonorepoNewAppFileInWorkspace", project: "monorepo",
		edits: []edit{{path: "apps/web/app/about/page.tsx", new: "import { percent } from \"@repo/utils\";\nimport { site } from \"../../lib/site\";\n\nexport default function About() {\n  return <p>{site.name} {percent(1)}</p>;\n}\n"}}},
	{name: "NodeESMNewModule", project: "node-esm",
		edits: []edit{{path: "src/report.ts", new: "import { createHash } from \"node:crypto\";\nimport fs from \"fs\";\nimport db from \"#db\";\nimport { slug } from \"./util.js\";\nimport type { User } from \"./types.js\";\nimport { helper } from \"lib/helper\";\nimport defaults from \"./defaults.json\" with { type: \"json\" };\n\nexport const digest = (u: User) => createHash(\"sha256\").update(slug(u.name) + helper(defaults.name)).digest(\"hex\") + fs.constants.F_OK + String(db);\n"}}},
	{name: "NodeESMMissingJSName", project: "node-esm", blocks: true, introduced: []string{`"./cache.js"`},
		edits: []edit{{path: "src/index.ts", old: "import { slug } from \"./util.js\";\n", new: "import { slug } from \"./util.js\";\nimport { cache } from \"./cache.js\";\nexport { cache };\n"}}},
	{name: "NodeESMBrokenSyntax", project: "node-esm", blocks: true, introduced: []string{"Expected"},
		edits: []edit{{path: "src/util.ts", old: "replace(/[^a-z0-9]+/g, \"-\");", new: "replace(/[^a-z0-9]+/g, \"-\";"}}},
}

// loadProject copies a project of testdata/projects into a fresh store.
func loadProject(t *testing.T, name string) *storage.Local {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("testdata", "projects", name)
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		_, err = store.Write(t.Context(), "p", filepath.ToSlash(rel), b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// applyCase makes a case's edits to after and returns what the change set
// would report: the files written, and those deleted.
func applyCase(t *testing.T, after *storage.Local, edits []edit) ([]verify.Change, []string) {
	t.Helper()
	var changed []verify.Change
	var removed []string
	for _, e := range edits {
		if e.del {
			if err := after.Delete(t.Context(), "p", e.path); err != nil {
				t.Fatal(err)
			}
			removed = append(removed, e.path)
			continue
		}
		content := e.new
		if e.old != "" {
			b, _, err := after.Read(t.Context(), "p", e.path)
			if err != nil || !strings.Contains(string(b), e.old) {
				t.Fatalf("case edit of %s: %q not found (%v)", e.path, e.old, err)
			}
			content = strings.Replace(string(b), e.old, e.new, 1)
		}
		if _, err := after.Write(t.Context(), "p", e.path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		changed = append(changed, verify.Change{Path: e.path})
	}
	return changed, removed
}

func TestMultiFileProjects(t *testing.T) {
	t.Parallel()
	for _, tc := range projectCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before, after := loadProject(t, tc.project), loadProject(t, tc.project)
			changed, removed := applyCase(t, after, tc.edits)
			rep, err := verify.CheckChange(t.Context(), before, after, "p", changed, removed)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Passed() == tc.blocks {
				t.Fatalf("blocks = %v, want %v\n%s", !rep.Passed(), tc.blocks, rep)
			}
			if len(rep.Problems) != len(tc.introduced) {
				t.Fatalf("%d introduced problem(s), want %d\n%s", len(rep.Problems), len(tc.introduced), rep)
			}
			for i, want := range tc.introduced {
				if !strings.Contains(rep.Problems[i].Message, want) {
					t.Errorf("problem %d = %s, want it to mention %s", i+1, rep.Problems[i], want)
				}
			}
			if len(rep.Preexisting) != tc.preexisting || len(rep.Unchecked) != tc.unchecked {
				t.Errorf("%d preexisting and %d unchecked, want %d and %d\n%s", len(rep.Preexisting), len(rep.Unchecked), tc.preexisting, tc.unchecked, rep)
			}
		})
	}
}

// TestMovedFileKeepsItsBaseline moves a file with a broken import: the
// import was broken at its old path, so it is not the move's doing; a file
// importing the old path is broken by the move.
func TestMovedFileKeepsItsBaseline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		importer bool
	}{{"Alone", false}, {"WithImporter", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before, after := loadProject(t, "vite-react-ts"), loadProject(t, "vite-react-ts")
			if tt.importer {
				for _, s := range []*storage.Local{before, after} {
					if _, err := s.Write(t.Context(), "p", "src/reports.ts", []byte("export { report } from './legacy/report'\n")); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := after.Move(t.Context(), "p", "src/legacy/report.ts", "src/legacy/monthly.ts", false); err != nil {
				t.Fatal(err)
			}
			rep, err := verify.CheckChange(t.Context(), before, after, "p",
				[]verify.Change{{Path: "src/legacy/monthly.ts", From: "src/legacy/report.ts"}}, []string{"src/legacy/report.ts"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Preexisting) != 1 || rep.Passed() == tt.importer {
				t.Fatalf("report:\n%s", rep)
			}
			if tt.importer && (len(rep.Problems) != 1 || rep.Problems[0].Path != "src/reports.ts") {
				t.Fatalf("report:\n%s", rep)
			}
		})
	}
}
