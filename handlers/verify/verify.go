// Package verify checks a build's changes before the build may finish,
// without a shell: TS/TSX/JS/JSX/CSS files must parse (esbuild's Go API),
// relative imports must resolve to files that exist, bare imports must be
// declared in package.json, and JSON files must parse.
package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
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

// Files is what the checks read: the project as the build left it.
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

// Report is the outcome of the checks over a set of files.
type Report struct {
	Checked  []string  `json:"checked"`
	Skipped  []string  `json:"skipped,omitempty"` // changed files no check applies to
	Problems []Problem `json:"problems"`
}

// Passed reports whether no check failed.
func (r Report) Passed() bool { return len(r.Problems) == 0 }

// String renders the report for the model.
func (r Report) String() string {
	if r.Passed() {
		return fmt.Sprintf("static checks passed for %d file(s)", len(r.Checked))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problem(s) in the changed files:\n", len(r.Problems))
	for _, p := range r.Problems {
		loc := p.Path
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d:%d", p.Path, p.Line, p.Column)
		}
		fmt.Fprintf(&b, "- %s [%s] %s\n", loc, p.Check, p.Message)
	}
	return b.String()
}

var loaders = map[string]api.Loader{
	".ts": api.LoaderTS, ".mts": api.LoaderTS, ".cts": api.LoaderTS, ".tsx": api.LoaderTSX,
	".js": api.LoaderJSX, ".mjs": api.LoaderJS, ".cjs": api.LoaderJS, ".jsx": api.LoaderJSX,
	".css": api.LoaderCSS,
}

// resolveExts are tried, in order, after an extensionless relative import.
var resolveExts = []string{".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".json", ".css", ".vue", ".svelte", ".d.ts"}

// Check runs the checks over the given files (the ones a build wrote).
func Check(ctx context.Context, files Files, projectID string, paths []string) (Report, error) {
	rep := Report{Checked: []string{}, Problems: []Problem{}}
	all, err := files.List(ctx, projectID, "")
	if err != nil {
		return rep, fmt.Errorf("verify: list project: %w", err)
	}
	exists := make(map[string]bool, len(all))
	for _, f := range all {
		exists[f.Path] = true
	}
	deps := newDeps(ctx, files, projectID, exists)
	sorted := append([]string{}, paths...)
	sort.Strings(sorted)
	for _, p := range sorted {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		ext := strings.ToLower(path.Ext(p))
		loader, isCode := loaders[ext]
		if !isCode && ext != ".json" {
			rep.Skipped = append(rep.Skipped, p)
			continue
		}
		content, _, err := files.Read(ctx, projectID, p)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("verify: read %s: %w", p, err)
		}
		rep.Checked = append(rep.Checked, p)
		if ext == ".json" {
			rep.Problems = append(rep.Problems, checkJSON(p, content)...)
			continue
		}
		problems, imports := parse(p, string(content), loader)
		rep.Problems = append(rep.Problems, problems...)
		for _, imp := range imports {
			if pr := resolve(p, imp, exists, deps); pr != nil {
				rep.Problems = append(rep.Problems, *pr)
			}
		}
	}
	return rep, nil
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

// parse runs esbuild over one file: its syntax errors, and every import it
// makes (collected by a plugin that marks them all external).
func parse(p, content string, loader api.Loader) ([]Problem, []importRef) {
	var imports []importRef
	collector := api.Plugin{Name: "collect-imports", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			if a.Kind != api.ResolveEntryPoint {
				imports = append(imports, importRef{spec: a.Path, kind: a.Kind})
			}
			return api.OnResolveResult{Path: a.Path, External: true}, nil
		})
	}}
	res := api.Build(api.BuildOptions{
		Stdin:    &api.StdinOptions{Contents: content, Sourcefile: p, Loader: loader, ResolveDir: "/"},
		Bundle:   true,
		Write:    false,
		LogLevel: api.LogLevelSilent,
		Plugins:  []api.Plugin{collector},
		Outdir:   "/out",
	})
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
	for i := range imports {
		imports[i].line = lineOf(content, imports[i].spec)
	}
	return problems, imports
}

func lineOf(content, spec string) int {
	for _, q := range []string{`"` + spec + `"`, `'` + spec + `'`, "`" + spec + "`", spec} {
		if i := strings.Index(content, q); i >= 0 {
			return strings.Count(content[:i], "\n") + 1
		}
	}
	return 0
}

// resolve checks one import of file p.
func resolve(p string, imp importRef, exists map[string]bool, deps *deps) *Problem {
	spec := imp.spec
	if i := strings.IndexAny(spec, "?#"); i > 0 {
		spec = spec[:i]
	}
	problem := func(check, msg string) *Problem {
		return &Problem{Path: p, Line: imp.line, Check: check, Message: msg}
	}
	switch {
	case spec == "" || strings.Contains(spec, "://") || strings.HasPrefix(spec, "//") || strings.HasPrefix(spec, "data:"):
		return nil
	case strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") || spec == "." || spec == "..":
		target := path.Join(path.Dir(p), spec)
		if target == ".." || strings.HasPrefix(target, "../") {
			return problem(CheckImport, fmt.Sprintf("import %q climbs out of the project", imp.spec))
		}
		if found(target, exists) {
			return nil
		}
		return problem(CheckImport, fmt.Sprintf("import %q does not resolve: no file %s (tried the extensions %s and index files)",
			imp.spec, target, strings.Join(resolveExts[:6], " ")))
	case strings.HasPrefix(spec, "/"):
		target := strings.TrimPrefix(spec, "/")
		if found(target, exists) || found(path.Join("public", target), exists) {
			return nil
		}
		return problem(CheckImport, fmt.Sprintf("import %q does not resolve: no file %s or public/%s", imp.spec, target, target))
	case strings.HasPrefix(spec, "@/") || strings.HasPrefix(spec, "~/"):
		target := path.Join("src", spec[2:])
		if found(target, exists) {
			return nil
		}
		return problem(CheckImport, fmt.Sprintf("import %q does not resolve: no file %s", imp.spec, target))
	case imp.kind == api.ResolveCSSURLToken || imp.kind == api.ResolveCSSImportRule:
		// A bare url(x) in CSS is relative.
		if found(path.Join(path.Dir(p), spec), exists) {
			return nil
		}
		return problem(CheckImport, fmt.Sprintf("url %q does not resolve to a file", imp.spec))
	}
	pkg := packageName(spec)
	if builtin(pkg) {
		return nil
	}
	switch declared, where := deps.declares(p, pkg); {
	case declared:
		return nil
	case where == "":
		return problem(CheckDependency, fmt.Sprintf("bare import %q, but the project has no package.json declaring %s", imp.spec, pkg))
	default:
		return problem(CheckDependency, fmt.Sprintf("bare import %q: %s is not declared in %s (dependencies, devDependencies or peerDependencies)", imp.spec, pkg, where))
	}
}

func found(target string, exists map[string]bool) bool {
	if exists[target] {
		return true
	}
	for _, ext := range resolveExts {
		if exists[target+ext] || exists[target+"/index"+ext] {
			return true
		}
	}
	// TypeScript's ESM style: "./a.js" names a.ts.
	if ext := path.Ext(target); ext == ".js" || ext == ".jsx" || ext == ".mjs" {
		base := strings.TrimSuffix(target, ext)
		return exists[base+".ts"] || exists[base+".tsx"] || exists[base+".mts"]
	}
	return false
}

func packageName(spec string) string {
	parts := strings.SplitN(spec, "/", 3)
	if strings.HasPrefix(spec, "@") && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

var nodeBuiltins = map[string]bool{}

func init() {
	for _, m := range strings.Fields(`assert async_hooks buffer child_process cluster console constants crypto dgram
		diagnostics_channel dns domain events fs http http2 https inspector module net os path perf_hooks process
		punycode querystring readline repl stream string_decoder sys timers tls trace_events tty url util v8 vm
		wasi worker_threads zlib`) {
		nodeBuiltins[m] = true
	}
}

func builtin(pkg string) bool {
	return strings.HasPrefix(pkg, "node:") || strings.HasPrefix(pkg, "bun:") || nodeBuiltins[pkg]
}

// deps reads the package.json files that govern each file, once each.
type deps struct {
	ctx       context.Context
	files     Files
	projectID string
	exists    map[string]bool
	cache     map[string]map[string]bool
}

func newDeps(ctx context.Context, files Files, projectID string, exists map[string]bool) *deps {
	return &deps{ctx: ctx, files: files, projectID: projectID, exists: exists, cache: map[string]map[string]bool{}}
}

// declares looks for pkg in the package.json files from p's directory up to
// the root; where is the nearest package.json, "" when there is none.
func (d *deps) declares(p, pkg string) (declared bool, where string) {
	dir := path.Dir(p)
	for {
		pj := path.Join(dir, "package.json")
		if dir == "." {
			pj = "package.json"
		}
		if d.exists[pj] {
			if where == "" {
				where = pj
			}
			if d.load(pj)[pkg] {
				return true, where
			}
		}
		if dir == "." || dir == "/" || dir == "" {
			return false, where
		}
		dir = path.Dir(dir)
	}
}

func (d *deps) load(pj string) map[string]bool {
	if m, ok := d.cache[pj]; ok {
		return m
	}
	m := map[string]bool{}
	d.cache[pj] = m
	content, _, err := d.files.Read(d.ctx, d.projectID, pj)
	if err != nil {
		return m
	}
	var doc struct {
		Name                 string            `json:"name"`
		Dependencies         map[string]string `json:"dependencies"`
		DevDependencies      map[string]string `json:"devDependencies"`
		PeerDependencies     map[string]string `json:"peerDependencies"`
		OptionalDependencies map[string]string `json:"optionalDependencies"`
	}
	if json.Unmarshal(content, &doc) != nil {
		return m
	}
	for _, set := range []map[string]string{doc.Dependencies, doc.DevDependencies, doc.PeerDependencies, doc.OptionalDependencies} {
		for k := range set {
			m[k] = true
		}
	}
	if doc.Name != "" {
		m[doc.Name] = true
	}
	return m
}
