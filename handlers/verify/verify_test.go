package verify_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/handlers/verify"
	"github.com/agentworker/agentworker/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	t.Parallel()
	const project = "p1"
	setup := func(t *testing.T, files map[string]string) *storage.Local {
		t.Helper()
		store, err := storage.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for p, c := range files {
			if _, err := store.Write(t.Context(), project, p, []byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		return store
	}
	pkg := `{"dependencies":{"react":"^18"},"devDependencies":{"@types/react":"^18"}}`
	tests := []struct {
		name  string
		files map[string]string
		check []string
		want  []string // check:path substrings of the problems, in order
	}{
		{name: "Clean", files: map[string]string{"package.json": pkg,
			"src/App.tsx":   "import React from 'react'\nimport { b } from './b'\nimport './App.css'\nexport const App = () => <div>{b}</div>\n",
			"src/b.ts":      "export const b: number = 1\n",
			"src/App.css":   ".a { color: red }\n",
			"src/util.js":   "import x from './b.js'\nexport default x\n",
			"src/data.json": `{"a": 1}`,
		}, check: []string{"src/App.tsx", "src/b.ts", "src/App.css", "src/util.js", "src/data.json"}},
		{name: "SyntaxError", files: map[string]string{"src/a.ts": "export const a = (;\n"}, check: []string{"src/a.ts"}, want: []string{"syntax:src/a.ts"}},
		{name: "MissingRelativeImport", files: map[string]string{"src/a.ts": "import { x } from './missing'\nexport const a = x\n"},
			check: []string{"src/a.ts"}, want: []string{"import:src/a.ts"}},
		{name: "UndeclaredPackage", files: map[string]string{"package.json": pkg, "src/a.ts": "import axios from 'axios'\nimport fs from 'node:fs'\nimport p from 'path'\nexport default [axios, fs, p]\n"},
			check: []string{"src/a.ts"}, want: []string{"dependency:src/a.ts"}},
		{name: "BadJSON", files: map[string]string{"a.json": "{\"a\": }"}, check: []string{"a.json"}, want: []string{"json:a.json"}},
		{name: "BadCSS", files: map[string]string{"a.css": ".a { color: red; \n"}, check: []string{"a.css"}, want: []string{"syntax:a.css"}},
		{name: "DeletedAndOther", files: map[string]string{"README.md": "# x"}, check: []string{"README.md", "gone.ts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := setup(t, tt.files)
			rep, err := verify.Check(t.Context(), store, project, tt.check)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range rep.Problems {
				got = append(got, p.Check+":"+p.Path)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("problems = %v, want %v\n%s", got, tt.want, rep)
			}
			if len(tt.want) > 0 && (rep.Passed() || rep.Problems[0].Line == 0) {
				t.Fatalf("report %+v: want a failed report with a line", rep)
			}
		})
	}
}

func TestTsconfigComments(t *testing.T) {
	t.Parallel()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"tsconfig.json": "{\n  // paths for \"@/\"\n  \"compilerOptions\": { /* a */ \"paths\": { \"@/*\": [\"./src/*\",], }, },\n  \"include\": [\"src\", // all\n  ],\n}\n",
		"src/a.ts":      "export const a = 1\n",
		"src/b.ts":      "import { a } from '@/a'\nimport { c } from '@/c'\nexport const b = a + c\n",
	}
	for p, c := range files {
		if _, err := store.Write(t.Context(), "p", p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := verify.Check(t.Context(), store, "p", []string{"src/b.ts"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Message, `tsconfig paths "@/*"`) {
		t.Fatalf("report:\n%s", rep)
	}
}
