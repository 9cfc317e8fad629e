package verify

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// verdict is the outcome of resolving one import.
type verdict struct {
	problem *Problem // the import does not resolve
	unsure  *Problem // the checks cannot tell (an alias of a tool they do not read)
}

// site is one import of one file, for the verdicts about it.
type site struct {
	from string
	imp  importRef
}

func (s site) bad(check, format string, args ...any) verdict {
	return verdict{problem: &Problem{Path: s.from, Line: s.imp.line, Check: check, Message: fmt.Sprintf(format, args...)}}
}

func (s site) unsure(format string, args ...any) verdict {
	return verdict{unsure: &Problem{Path: s.from, Line: s.imp.line, Check: CheckImport, Message: fmt.Sprintf(format, args...)}}
}

// resolveExts are tried, in order, after an extensionless import.
var resolveExts = []string{".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".json", ".css", ".vue", ".svelte"}

// sourceOf maps a JavaScript extension to the TypeScript sources it names
// in TypeScript's ESM style ("./a.js" for a.ts).
var sourceOf = map[string][]string{
	".js":  {".ts", ".tsx", ".d.ts"},
	".jsx": {".tsx"},
	".mjs": {".mts", ".d.mts"},
	".cjs": {".cts", ".d.cts"},
}

// file reports whether target names a file as a bundler or TypeScript
// resolves it: as it is, with an extension, as a directory's index or
// package.json entry, or a ".js" name for a ".ts" source.
func (p *project) file(target string) bool { return p.fileDepth(path.Clean(target), 0) }

func (p *project) fileDepth(t string, depth int) bool {
	if p.exists[t] {
		return true
	}
	for _, ext := range resolveExts {
		if p.exists[t+ext] || p.exists[t+"/index"+ext] {
			return true
		}
	}
	if ext := path.Ext(t); sourceOf[ext] != nil {
		base := strings.TrimSuffix(t, ext)
		for _, src := range sourceOf[ext] {
			if p.exists[base+src] {
				return true
			}
		}
	}
	if p.dirs[t] && depth < 3 {
		if pj := p.pkg(join(t, "package.json")); pj != nil {
			for _, entry := range []string{pj.Main, pj.Module, pj.Types} {
				if entry != "" && p.fileDepth(path.Clean(join(t, entry)), depth+1) {
					return true
				}
			}
		}
	}
	return false
}

// resolve checks one import of file from, like the toolchain would:
// relative and absolute paths, tsconfig paths and baseUrl, package.json
// imports (#…) and exports, workspace packages, declared dependencies and
// Node's builtins.
func (p *project) resolve(from string, imp importRef) verdict {
	spec := imp.spec
	if i := strings.IndexByte(spec, '?'); i > 0 {
		spec = spec[:i] // ?raw, ?url
	}
	if i := strings.IndexByte(spec, '#'); i > 0 {
		spec = spec[:i]
	}
	dir := path.Dir(from)
	at := site{from, imp}
	bad := at.bad
	switch {
	case spec == "" || strings.Contains(spec, "://") || strings.HasPrefix(spec, "//") || strings.HasPrefix(spec, "data:"):
		return verdict{}
	case strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") || spec == "." || spec == "..":
		target := path.Join(dir, spec)
		if target == ".." || strings.HasPrefix(target, "../") {
			return bad(CheckImport, "import %q climbs out of the project", imp.spec)
		}
		if p.file(target) {
			return verdict{}
		}
		return bad(CheckImport, "import %q does not resolve: no file %s (tried the extensions .ts .tsx .js .jsx .json .css, index files, and .ts sources of .js names)", imp.spec, target)
	case strings.HasPrefix(spec, "/"):
		target := strings.TrimPrefix(spec, "/")
		if p.file(target) || p.file(path.Join("public", target)) {
			return verdict{}
		}
		return bad(CheckImport, "import %q does not resolve: no file %s or public/%s", imp.spec, target, target)
	case imp.kind == api.ResolveCSSURLToken || imp.kind == api.ResolveCSSImportRule:
		// A bare url(x) or @import "x" in CSS is relative first.
		if p.file(path.Join(dir, spec)) {
			return verdict{}
		}
		if imp.kind == api.ResolveCSSURLToken {
			return bad(CheckImport, "url %q does not resolve to a file", imp.spec)
		}
		spec = strings.TrimPrefix(spec, "~")
	}
	return p.resolveBare(at, spec)
}

// resolveBare resolves a specifier that is neither relative nor absolute.
func (p *project) resolveBare(at site, spec string) verdict {
	from, imp, bad := at.from, at.imp, at.bad
	cfg := p.configFor(from)
	var pathsTried string
	if cfg != nil && len(cfg.paths) > 0 {
		if pattern, targets, ok := matchPaths(cfg.paths, spec); ok {
			for _, t := range targets {
				if p.file(path.Join(cfg.pathsBase, t)) {
					return verdict{}
				}
			}
			pathsTried = fmt.Sprintf("tsconfig paths %q in %s maps it to %s, which does not exist", pattern, cfg.file,
				path.Join(cfg.pathsBase, targets[0]))
		}
	}
	if cfg != nil && cfg.baseURL != "" && p.file(path.Join(cfg.baseURL, spec)) {
		return verdict{}
	}
	if strings.HasPrefix(spec, "#") {
		if v, ok := p.packageImport(at, spec); ok || pathsTried == "" {
			return v
		}
	}
	name := packageName(spec)
	if builtin(name) {
		return verdict{}
	}
	sub := strings.TrimPrefix(strings.TrimPrefix(spec, name), "/")
	if own := p.nearestPkg(from); own != nil && own.Name == name && len(own.Exports) > 0 {
		return p.packageSubpath(at, own, name, sub)
	}
	if wdir, ok := p.workspaces[name]; ok {
		return p.packageSubpath(at, p.pkg(join(wdir, "package.json")), name, sub)
	}
	declared, where := p.declares(from, name)
	if declared {
		return verdict{}
	}
	if pathsTried != "" {
		return bad(CheckImport, "import %q does not resolve: %s", imp.spec, pathsTried)
	}
	// "@/x" and "~/x" mean src/x (or the root) in most templates.
	if strings.HasPrefix(spec, "@/") || strings.HasPrefix(spec, "~/") {
		if p.file(path.Join("src", spec[2:])) || p.file(spec[2:]) {
			return verdict{}
		}
	}
	if cfgFile, ok := p.mayAlias(spec); ok {
		return at.unsure("import %q may be an alias defined in %s, which the checks do not evaluate: not checked", imp.spec, cfgFile)
	}
	if where == "" {
		return bad(CheckDependency, "bare import %q, but the project has no package.json declaring %s", imp.spec, name)
	}
	return bad(CheckDependency, "bare import %q: %s is not declared in %s (dependencies, devDependencies or peerDependencies)", imp.spec, name, where)
}

// matchPaths finds the tsconfig paths pattern for spec (an exact key, or
// the key with the longest prefix before its "*") and its targets with
// the "*" filled in.
func matchPaths(paths map[string][]string, spec string) (string, []string, bool) {
	if ts, ok := paths[spec]; ok && len(ts) > 0 {
		return spec, ts, true
	}
	best, bestLen, star := "", -1, ""
	keys := make([]string, 0, len(paths))
	for k := range paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		pre, suf, ok := strings.Cut(k, "*")
		if !ok || !strings.HasPrefix(spec, pre) || !strings.HasSuffix(spec, suf) || len(spec) < len(pre)+len(suf) {
			continue
		}
		if len(pre) > bestLen {
			best, bestLen, star = k, len(pre), spec[len(pre):len(spec)-len(suf)]
		}
	}
	if bestLen < 0 || len(paths[best]) == 0 {
		return "", nil, false
	}
	var out []string
	for _, t := range paths[best] {
		out = append(out, strings.Replace(t, "*", star, 1))
	}
	return best, out, true
}

// packageImport resolves "#x" through the "imports" field of the
// package.json whose scope holds from. ok is false when no field defines it.
func (p *project) packageImport(at site, spec string) (verdict, bool) {
	from, imp, bad := at.from, at.imp, at.bad
	pj := p.nearestPkg(from)
	if pj == nil || len(pj.Imports) == 0 {
		return bad(CheckImport, "import %q does not resolve: no package.json above %s has an \"imports\" field", imp.spec, from), false
	}
	var imports map[string]json.RawMessage
	if json.Unmarshal(pj.Imports, &imports) != nil {
		return bad(CheckImport, "import %q: the \"imports\" field of %s is not an object", imp.spec, join(pj.dir, "package.json")), false
	}
	key, star, ok := matchKey(imports, spec)
	if !ok {
		return bad(CheckImport, "import %q is not defined in the \"imports\" of %s", imp.spec, join(pj.dir, "package.json")), false
	}
	targets := leaves(imports[key])
	for _, t := range targets {
		t = strings.ReplaceAll(t, "*", star)
		if strings.HasPrefix(t, "./") {
			if p.file(path.Join(pj.dir, t)) {
				return verdict{}, true
			}
			continue
		}
		if declared, _ := p.declares(from, packageName(t)); declared || builtin(packageName(t)) {
			return verdict{}, true
		}
		if _, ok := p.workspaces[packageName(t)]; ok {
			return verdict{}, true
		}
	}
	if len(targets) == 0 {
		return bad(CheckImport, "import %q is excluded (null) by the \"imports\" of %s", imp.spec, join(pj.dir, "package.json")), true
	}
	return bad(CheckImport, "import %q does not resolve: the \"imports\" of %s map it to %s, which does not exist", imp.spec,
		join(pj.dir, "package.json"), strings.ReplaceAll(targets[0], "*", star)), true
}

// matchKey finds the key of an imports or exports map that names sub: an
// exact key, or a pattern with one "*" (the longest prefix wins).
func matchKey(m map[string]json.RawMessage, sub string) (key, star string, ok bool) {
	if _, ok := m[sub]; ok {
		return sub, "", true
	}
	bestLen := -1
	for k := range m {
		pre, suf, has := strings.Cut(k, "*")
		if has && strings.HasPrefix(sub, pre) && strings.HasSuffix(sub, suf) && len(sub) >= len(pre)+len(suf) && len(pre) > bestLen {
			key, star, bestLen = k, sub[len(pre):len(sub)-len(suf)], len(pre)
		}
	}
	return key, star, bestLen >= 0
}

// leaves returns the path strings of an exports or imports target: a
// string, an array of targets, or an object of conditions.
func leaves(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		var out []string
		for _, a := range arr {
			out = append(out, leaves(a)...)
		}
		return out
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, leaves(obj[k])...)
		}
		return out
	}
	return nil // null: excluded
}

// packageSubpath checks an import of a package in the project (a
// workspace package, or the file's own package by name): its "exports"
// must export the subpath; without exports the file must exist.
func (p *project) packageSubpath(at site, pj *pkgJSON, name, sub string) verdict {
	imp, bad := at.imp, at.bad
	if pj == nil {
		return verdict{}
	}
	want := "."
	if sub != "" {
		want = "./" + sub
	}
	if len(pj.Exports) > 0 && string(pj.Exports) != "null" {
		var m map[string]json.RawMessage
		subpaths := json.Unmarshal(pj.Exports, &m) == nil && len(m) > 0
		for k := range m {
			if !strings.HasPrefix(k, ".") {
				subpaths = false // an object of conditions: only "." is exported
			}
		}
		if !subpaths {
			m = map[string]json.RawMessage{".": pj.Exports}
		}
		key, _, ok := matchKey(m, want)
		if ok && len(leaves(m[key])) > 0 {
			return verdict{}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return bad(CheckImport, "import %q: %s does not export %q (its package.json exports %s)", imp.spec, name, want, strings.Join(keys, ", "))
	}
	if sub == "" || p.file(join(pj.dir, sub)) {
		return verdict{}
	}
	if first, _, _ := strings.Cut(sub, "/"); buildOutput[first] {
		return at.unsure("import %q names %s/%s, build output that is not in the project: not checked", imp.spec, pj.dir, sub)
	}
	return bad(CheckImport, "import %q does not resolve: workspace package %s (%s) has no file %s", imp.spec, name, pj.dir, sub)
}

var buildOutput = map[string]bool{"dist": true, "build": true, "lib": true, "out": true, "esm": true, "cjs": true, "es": true, "types": true}

// declares looks for pkg in the package.json files from p's directory up
// to the root (a workspace root's dependencies serve its packages); where
// is the nearest package.json, "" when there is none.
func (p *project) declares(file, pkg string) (declared bool, where string) {
	up(path.Dir(file), func(dir string) bool {
		f := join(dir, "package.json")
		if !p.exists[f] {
			return false
		}
		if where == "" {
			where = f
		}
		if pj := p.pkg(f); pj != nil && (pj.deps[pkg] || pj.deps["@types/"+strings.ReplaceAll(strings.TrimPrefix(pkg, "@"), "/", "__")] || pj.Name == pkg) {
			declared = true
		}
		return declared
	})
	return declared, where
}

// mayAlias reports a bundler or framework config that mentions the
// specifier's first segment as a key or string, as an alias would.
func (p *project) mayAlias(spec string) (string, bool) {
	if len(p.bundlers) == 0 {
		return "", false
	}
	prefix, _, _ := strings.Cut(spec, "/")
	if i := strings.IndexByte(prefix, ':'); i > 0 {
		// A virtual module of a plugin ("virtual:pwa-register").
		return p.bundlers[0], true
	}
	q := regexp.QuoteMeta(prefix)
	re := regexp.MustCompile("[\"'`]" + q + "(?:/|[\"'`])|(?:^|[\\s{,])" + q + "\\s*:")
	for _, f := range p.bundlers {
		if b, ok := p.content(f); ok && re.Match(b) {
			return f, true
		}
	}
	return "", false
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
