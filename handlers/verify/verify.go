// Package verify checks a build's changes before the build may finish,
// without a shell: TS/TSX/JS/JSX/CSS files must parse (esbuild's Go API),
// their imports must resolve, and JSON files must parse.
//
// Imports resolve as the toolchain resolves them: relative files (with
// extensions, index files, and ".js" names of ".ts" sources), tsconfig or
// jsconfig paths and baseUrl (following extends and references),
// package.json imports ("#x") and exports, workspace packages, declared
// dependencies, and Node's builtins, type-only imports included. An import
// that may be an alias of a bundler config the checks do not evaluate is
// reported as unchecked, never as a problem.
//
// Checks judge the change, not the project: [CheckChange] checks each
// changed file as it was before the change and as it is after, and only a
// problem the change introduced fails the check. Problems that were there
// before are reported as information.
package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/agentworker/agentworker/storage"
)

// Checks of a Problem.
const (
	CheckSyntax     = "syntax"
	CheckImport     = "import"
	CheckDependency = "dependency"
	CheckJSON       = "json"
)

// Files is what the checks read: one state of the project.
type Files interface {
	Read(ctx context.Context, projectID, path string) ([]byte, storage.FileInfo, error)
	List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error)
}

// Problem is one failed check.
type Problem struct {
	Path    string `json:"path"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	loc := p.Path
	switch {
	case p.Line > 0 && p.Column > 0:
		loc = fmt.Sprintf("%s:%d:%d", p.Path, p.Line, p.Column)
	case p.Line > 0:
		loc = fmt.Sprintf("%s:%d", p.Path, p.Line)
	}
	return fmt.Sprintf("%s [%s] %s", loc, p.Check, p.Message)
}

// key identifies a problem across the two states of a change: the same
// check and message in the same file, wherever the line moved.
func (p Problem) key() string { return p.Path + "\x00" + p.Check + "\x00" + p.Message }

// Report is the outcome of the checks over a set of files.
type Report struct {
	Checked []string `json:"checked"`
	Skipped []string `json:"skipped,omitempty"` // changed files no check applies to
	// Problems are what the change introduced; they fail the check.
	Problems []Problem `json:"problems"`
	// Preexisting problems were there before the change: information.
	Preexisting []Problem `json:"preexisting,omitempty"`
	// Unchecked imports are those the checks cannot judge (an alias of a
	// bundler config they do not evaluate): information.
	Unchecked []Problem `json:"unchecked,omitempty"`
}

// Passed reports whether the change introduced no problem.
func (r Report) Passed() bool { return len(r.Problems) == 0 }

// String renders the report for the model.
func (r Report) String() string {
	var b strings.Builder
	if r.Passed() {
		fmt.Fprintf(&b, "static checks passed for %d file(s)\n", len(r.Checked))
	} else {
		fmt.Fprintf(&b, "%d problem(s) introduced by the changes:\n", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	list := func(title string, ps []Problem) {
		if len(ps) == 0 {
			return
		}
		b.WriteString(title)
		for i, p := range ps {
			if i == 10 {
				fmt.Fprintf(&b, "- … and %d more\n", len(ps)-10)
				break
			}
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	list(fmt.Sprintf("For information, not to fix unless the task asks: %d problem(s) were there before the changes:\n", len(r.Preexisting)), r.Preexisting)
	list("Not checked (the checks cannot tell):\n", r.Unchecked)
	return b.String()
}

var loaders = map[string]api.Loader{
	".ts": api.LoaderTS, ".mts": api.LoaderTS, ".cts": api.LoaderTS, ".tsx": api.LoaderTSX,
	".js": api.LoaderJSX, ".mjs": api.LoaderJS, ".cjs": api.LoaderJS, ".jsx": api.LoaderJSX,
	".css": api.LoaderCSS,
}

// Change is one file a change set writes.
type Change struct {
	Path string // where the change leaves it
	From string // where it was before, when the change moved it; "" for Path
}

// Check runs the checks over the given files of one project state, every
// problem counted.
func Check(ctx context.Context, files Files, projectID string, paths []string) (Report, error) {
	after, err := newProject(ctx, files, projectID)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Checked: []string{}, Problems: []Problem{}}
	sorted := append([]string{}, paths...)
	sort.Strings(sorted)
	for _, p := range sorted {
		found, err := checkFile(ctx, after, p, &rep)
		if err != nil {
			return rep, err
		}
		rep.Problems = append(rep.Problems, found.problems...)
		rep.Unchecked = append(rep.Unchecked, found.unsure...)
	}
	return rep, nil
}

// CheckChange checks the files a change writes in the project after the
// change, and the same files in the project before it: only the problems
// the change introduced fail the report. removed are the paths the change
// deletes or moves away; the files that import them are checked too, so a
// deletion that breaks an import elsewhere is caught.
func CheckChange(ctx context.Context, before, after Files, projectID string, changed []Change, removed []string) (Report, error) {
	// The project before the change is listed only for a file with
	// findings to compare: a clean change lists the project once.
	var was *project
	is, err := newProject(ctx, after, projectID)
	if err != nil {
		return Report{}, err
	}
	changed = append(changed, is.dependents(removed, changed)...)
	sort.SliceStable(changed, func(i, j int) bool { return changed[i].Path < changed[j].Path })
	changed = slices.CompactFunc(changed, func(a, b Change) bool { return a.Path == b.Path })
	rep := Report{Checked: []string{}, Problems: []Problem{}}
	for _, c := range changed {
		found, err := checkFile(ctx, is, c.Path, &rep)
		if err != nil {
			return rep, err
		}
		if len(found.problems) == 0 && len(found.unsure) == 0 {
			continue
		}
		from := c.From
		if from == "" {
			from = c.Path
		}
		var old findings
		if was == nil {
			if was, err = newProject(ctx, before, projectID); err != nil {
				return rep, err
			}
		}
		if was.exists[from] {
			var scratch Report
			if old, err = checkFile(ctx, was, from, &scratch); err != nil {
				return rep, err
			}
		}
		seen := map[string]int{}
		for _, p := range old.problems {
			p.Path = c.Path
			seen[p.key()]++
		}
		for _, p := range found.problems {
			if seen[p.key()] > 0 {
				seen[p.key()]--
				rep.Preexisting = append(rep.Preexisting, p)
			} else {
				rep.Problems = append(rep.Problems, p)
			}
		}
		rep.Unchecked = append(rep.Unchecked, found.unsure...)
	}
	return rep, nil
}

// findings are the problems of one file in one state.
type findings struct {
	problems []Problem
	unsure   []Problem
}

// checkFile checks one file of a project state, noting it as checked or
// skipped in rep.
func checkFile(ctx context.Context, p *project, file string, rep *Report) (findings, error) {
	var f findings
	if err := ctx.Err(); err != nil {
		return f, err
	}
	ext := strings.ToLower(path.Ext(file))
	loader, isCode := loaders[ext]
	if !isCode && ext != ".json" {
		rep.Skipped = append(rep.Skipped, file)
		return f, nil
	}
	content, _, err := p.files.Read(ctx, p.id, file)
	if errors.Is(err, storage.ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("verify: read %s: %w", file, err)
	}
	rep.Checked = append(rep.Checked, file)
	if ext == ".json" {
		f.problems = checkJSON(file, content)
		return f, nil
	}
	problems, imports := parse(file, string(content), loader)
	f.problems = problems
	for _, imp := range imports {
		v := p.resolve(file, imp)
		if v.problem != nil {
			f.problems = append(f.problems, *v.problem)
		}
		if v.unsure != nil {
			f.unsure = append(f.unsure, *v.unsure)
		}
	}
	return f, nil
}

// dependents are the code files (not already changed) that import one of
// the removed paths, found by name first, then by resolving their imports.
func (p *project) dependents(removed []string, changed []Change) []Change {
	if len(removed) == 0 {
		return nil
	}
	skip := map[string]bool{}
	for _, c := range changed {
		skip[c.Path] = true
	}
	var out []Change
	var files []string
	for f := range p.exists {
		if _, code := loaders[strings.ToLower(path.Ext(f))]; code && !skip[f] && !strings.Contains(f, "node_modules/") {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	const maxScanned = 500
	for i, f := range files {
		if i == maxScanned {
			break
		}
		b, ok := p.content(f)
		if !ok {
			continue
		}
		for _, r := range removed {
			stem := strings.TrimSuffix(path.Base(r), path.Ext(r))
			if stem == "index" {
				stem = path.Base(path.Dir(r))
			}
			if strings.Contains(string(b), stem) {
				out = append(out, Change{Path: f})
				break
			}
		}
	}
	return out
}

func checkJSON(p string, content []byte) []Problem {
	var v any
	err := json.Unmarshal(content, &v)
	if err == nil {
		return nil
	}
	pr := Problem{Path: p, Check: CheckJSON, Message: err.Error()}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		before := content[:min(int(se.Offset), len(content))]
		pr.Line = strings.Count(string(before), "\n") + 1
		pr.Column = len(before) - strings.LastIndex(string(before), "\n")
	}
	return []Problem{pr}
}

type importRef struct {
	spec string
	line int
	kind api.ResolveKind
}

// verbatim keeps the imports TypeScript would elide as unused or used
// only as types, so that each of them is resolved.
const verbatim = `{"compilerOptions":{"verbatimModuleSyntax":true}}`

// parse runs esbuild over one file: its syntax errors, and every import it
// makes (collected by a plugin that marks them all external), type-only
// imports included.
func parse(p, content string, loader api.Loader) ([]Problem, []importRef) {
	ts := loader == api.LoaderTS || loader == api.LoaderTSX
	raw := ""
	if ts {
		raw = verbatim
	}
	res, imports := build(p, content, loader, raw)
	if len(res.Errors) > 0 && raw != "" {
		// Judge the syntax as TypeScript itself would, without the option.
		res, imports = build(p, content, loader, "")
	}
	var problems []Problem
	msgs := res.Errors
	if loader == api.LoaderCSS {
		// esbuild recovers from CSS syntax errors with a warning.
		msgs = append(msgs, res.Warnings...)
	}
	for _, m := range msgs {
		pr := Problem{Path: p, Check: CheckSyntax, Message: m.Text}
		if m.Location != nil {
			pr.Line, pr.Column = m.Location.Line, m.Location.Column+1
			if m.Location.LineText != "" {
				pr.Message += " — in: " + strings.TrimSpace(m.Location.LineText)
			}
		}
		problems = append(problems, pr)
	}
	if ts && len(problems) == 0 {
		seen := map[string]bool{}
		for _, imp := range imports {
			seen[imp.spec] = true
		}
		for _, spec := range typeImports(content) {
			if !seen[spec] {
				seen[spec] = true
				imports = append(imports, importRef{spec: spec, kind: api.ResolveJSImportStatement})
			}
		}
	}
	for i := range imports {
		imports[i].line = lineOf(content, imports[i].spec)
	}
	return problems, imports
}

func build(p, content string, loader api.Loader, tsconfig string) (api.BuildResult, []importRef) {
	var imports []importRef
	seen := map[importRef]bool{}
	collector := api.Plugin{Name: "collect-imports", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			ref := importRef{spec: a.Path, kind: a.Kind}
			if a.Kind != api.ResolveEntryPoint && !seen[ref] {
				seen[ref] = true
				imports = append(imports, ref)
			}
			return api.OnResolveResult{Path: a.Path, External: true}, nil
		})
	}}
	res := api.Build(api.BuildOptions{
		Stdin:       &api.StdinOptions{Contents: content, Sourcefile: p, Loader: loader, ResolveDir: "/"},
		Bundle:      true,
		Write:       false,
		LogLevel:    api.LogLevelSilent,
		Plugins:     []api.Plugin{collector},
		Outdir:      "/out",
		TsconfigRaw: tsconfig,
	})
	return res, imports
}

// typeImportRE finds the statements TypeScript always elides:
// "import type … from", "export type … from", and import("x") types.
var typeImportRE = regexp.MustCompile(`(?m)^\s*(?:import|export)\s+type\s+(?:\{[^}]*\}|\*(?:\s+as\s+[\w$]+)?|[\w$]+(?:\s*,\s*\{[^}]*\})?)\s*from\s*['"]([^'"\n]+)['"]` +
	`|\bimport\s*\(\s*['"]([^'"\n]+)['"]\s*\)`)

func typeImports(content string) []string {
	var out []string
	for _, m := range typeImportRE.FindAllStringSubmatch(content, -1) {
		if m[1] != "" {
			out = append(out, m[1])
		} else if m[2] != "" {
			out = append(out, m[2])
		}
	}
	return out
}

func lineOf(content, spec string) int {
	for _, q := range []string{`"` + spec + `"`, `'` + spec + `'`, "`" + spec + "`", spec} {
		if i := strings.Index(content, q); i >= 0 {
			return strings.Count(content[:i], "\n") + 1
		}
	}
	return 0
}
