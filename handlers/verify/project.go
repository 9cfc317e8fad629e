package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/agentworker/agentworker/storage"
)

// project is one state of a project (before or after a change) as the
// resolver sees it: which files exist, and the package.json, tsconfig and
// bundler files that decide what an import means. Files are read once.
type project struct {
	ctx    context.Context
	files  Files
	id     string
	exists map[string]bool
	dirs   map[string]bool
	read   map[string][]byte // contents read, nil when unreadable

	pkgs       map[string]*pkgJSON  // by path of the package.json
	tsconfigs  map[string]*tsconfig // by path of the tsconfig, merged with what it extends
	workspaces map[string]string    // package name → its directory, for workspace packages
	bundlers   []string             // bundler and framework config files
}

// newProject lists the project from a recent listing where files keeps
// one (storage.RecentLister, at most its MaxAge old; a build's change set
// lays its own changes over it, always current): the build's context
// listed the project when it started, and listing it again before the
// finish cost every build a second listing. The checks judge the files the
// change writes; the rest of the project may change after any check.
func newProject(ctx context.Context, files Files, id string) (*project, error) {
	all, _, err := storage.ListRecent(ctx, files, id, "")
	if err != nil {
		return nil, fmt.Errorf("verify: list project: %w", err)
	}
	p := &project{ctx: ctx, files: files, id: id, exists: map[string]bool{}, dirs: map[string]bool{".": true},
		read: map[string][]byte{}, pkgs: map[string]*pkgJSON{}, tsconfigs: map[string]*tsconfig{}}
	for _, f := range all {
		p.exists[f.Path] = true
		for d := path.Dir(f.Path); d != "." && !p.dirs[d]; d = path.Dir(d) {
			p.dirs[d] = true
		}
		if bundlerConfig.MatchString(path.Base(f.Path)) && !strings.Contains(f.Path, "node_modules/") {
			p.bundlers = append(p.bundlers, f.Path)
		}
	}
	sort.Strings(p.bundlers)
	p.workspaces = p.findWorkspaces()
	return p, nil
}

// bundlerConfig names the files of tools that may alias imports the
// checks do not read (vite, webpack, rollup, next, nuxt, babel, jest …).
var bundlerConfig = regexp.MustCompile(`^(vite|vitest|webpack|rollup|rolldown|rspack|rsbuild|next|nuxt|svelte|astro|remix|babel|craco|vue|quasar|metro|jest|snowpack|parcel|esbuild|tsup)\.config\.[cm]?[jt]s$|^\.babelrc(\.json)?$`)

func (p *project) content(file string) ([]byte, bool) {
	if b, ok := p.read[file]; ok {
		return b, b != nil
	}
	if !p.exists[file] {
		return nil, false
	}
	b, _, err := p.files.Read(p.ctx, p.id, file)
	if err != nil {
		p.read[file] = nil
		return nil, false
	}
	if b == nil {
		b = []byte{}
	}
	p.read[file] = b
	return b, true
}

// pkgJSON is what the checks read from a package.json.
type pkgJSON struct {
	dir        string
	Name       string          `json:"name"`
	Main       string          `json:"main"`
	Module     string          `json:"module"`
	Types      string          `json:"types"`
	Exports    json.RawMessage `json:"exports"`
	Imports    json.RawMessage `json:"imports"`
	Workspaces json.RawMessage `json:"workspaces"`
	deps       map[string]bool
}

func (p *project) pkg(file string) *pkgJSON {
	if pj, ok := p.pkgs[file]; ok {
		return pj
	}
	p.pkgs[file] = nil
	b, ok := p.content(file)
	if !ok {
		return nil
	}
	var doc struct {
		pkgJSON
		Dependencies         map[string]string `json:"dependencies"`
		DevDependencies      map[string]string `json:"devDependencies"`
		PeerDependencies     map[string]string `json:"peerDependencies"`
		OptionalDependencies map[string]string `json:"optionalDependencies"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	pj := doc.pkgJSON
	pj.dir = path.Dir(file)
	pj.deps = map[string]bool{}
	for _, set := range []map[string]string{doc.Dependencies, doc.DevDependencies, doc.PeerDependencies, doc.OptionalDependencies} {
		for k := range set {
			pj.deps[k] = true
		}
	}
	p.pkgs[file] = &pj
	return &pj
}

// up calls fn for dir and each directory above it, up to the root ("."),
// until fn returns true.
func up(dir string, fn func(dir string) bool) {
	for {
		if fn(dir) || dir == "." || dir == "/" || dir == "" {
			return
		}
		dir = path.Dir(dir)
	}
}

func join(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return dir + "/" + name
}

// nearestPkg is the package.json whose scope holds file.
func (p *project) nearestPkg(file string) *pkgJSON {
	var found *pkgJSON
	up(path.Dir(file), func(dir string) bool {
		if pj := join(dir, "package.json"); p.exists[pj] {
			found = p.pkg(pj)
			return found != nil
		}
		return false
	})
	return found
}

// findWorkspaces maps the names of workspace packages (npm, yarn and pnpm
// workspaces of the root package.json or pnpm-workspace.yaml) to their
// directories.
func (p *project) findWorkspaces() map[string]string {
	var globs []string
	if root := p.pkg("package.json"); root != nil && len(root.Workspaces) > 0 {
		var list []string
		var obj struct {
			Packages []string `json:"packages"`
		}
		if json.Unmarshal(root.Workspaces, &list) == nil {
			globs = list
		} else if json.Unmarshal(root.Workspaces, &obj) == nil {
			globs = obj.Packages
		}
	}
	if b, ok := p.content("pnpm-workspace.yaml"); ok {
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "- ") {
				globs = append(globs, strings.Trim(strings.TrimSpace(l[2:]), `'"`))
			}
		}
	}
	ws := map[string]string{}
	if len(globs) == 0 {
		return ws
	}
	for f := range p.exists {
		if path.Base(f) != "package.json" || f == "package.json" || strings.Contains(f, "node_modules/") {
			continue
		}
		dir := path.Dir(f)
		in := false
		for _, g := range globs {
			if strings.HasPrefix(g, "!") {
				continue
			}
			if globMatch(strings.TrimSuffix(strings.TrimPrefix(g, "./"), "/"), dir) {
				in = true
			}
		}
		if pj := p.pkg(f); in && pj != nil && pj.Name != "" {
			ws[pj.Name] = dir
		}
	}
	return ws
}

// globMatch matches a slash-separated path against a glob with *, ? and
// ** (any number of directories).
func globMatch(glob, name string) bool {
	re, err := regexp.Compile("^" + globRE(glob) + "$")
	return err == nil && re.MatchString(name)
}

func globRE(glob string) string {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; {
		case strings.HasPrefix(glob[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case strings.HasPrefix(glob[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

// tsconfig is the part of a tsconfig.json (or jsconfig.json) that decides
// how imports resolve, with what it extends merged in.
type tsconfig struct {
	file    string
	baseURL string // a project path, "" when unset
	// pathsBase is the directory paths are relative to: baseUrl, or the
	// directory of the config that sets paths.
	pathsBase  string
	paths      map[string][]string
	include    []string // globs relative to the config's directory
	files      []string
	references []string // configs this one refers to
}

type rawTsconfig struct {
	Extends         json.RawMessage `json:"extends"`
	CompilerOptions struct {
		BaseURL *string              `json:"baseUrl"`
		Paths   *map[string][]string `json:"paths"`
	} `json:"compilerOptions"`
	Include    []string `json:"include"`
	Files      []string `json:"files"`
	References []struct {
		Path string `json:"path"`
	} `json:"references"`
}

// config loads a tsconfig with the configs it extends (a chain, or a list
// as TypeScript 5 allows; relative paths and workspace packages; configs
// from node_modules cannot be read and are skipped).
func (p *project) config(file string, depth int) *tsconfig {
	if c, ok := p.tsconfigs[file]; ok {
		return c
	}
	p.tsconfigs[file] = nil // a cycle reads as nothing
	b, ok := p.content(file)
	if !ok || depth > 10 {
		return nil
	}
	var raw rawTsconfig
	if json.Unmarshal(jsonc(b), &raw) != nil {
		return nil
	}
	dir := path.Dir(file)
	c := &tsconfig{file: file}
	var parents []string
	var one string
	if json.Unmarshal(raw.Extends, &one) == nil && one != "" {
		parents = []string{one}
	} else {
		_ = json.Unmarshal(raw.Extends, &parents)
	}
	for _, ext := range parents {
		if base := p.config(p.extendsPath(dir, ext), depth+1); base != nil {
			c.baseURL, c.pathsBase, c.paths = base.baseURL, base.pathsBase, base.paths
			c.include, c.files = base.include, base.files
		}
	}
	if u := raw.CompilerOptions.BaseURL; u != nil {
		c.baseURL = path.Clean(join(dir, *u))
		if c.paths != nil {
			c.pathsBase = c.baseURL
		}
	}
	if ps := raw.CompilerOptions.Paths; ps != nil {
		c.paths = *ps
		c.pathsBase = dir
		if c.baseURL != "" {
			c.pathsBase = c.baseURL
		}
	}
	if raw.Include != nil {
		c.include = nil
		for _, g := range raw.Include {
			c.include = append(c.include, path.Clean(join(dir, g)))
		}
	}
	if raw.Files != nil {
		c.files = nil
		for _, f := range raw.Files {
			c.files = append(c.files, path.Clean(join(dir, f)))
		}
	}
	for _, r := range raw.References {
		ref := path.Clean(join(dir, r.Path))
		if !strings.HasSuffix(ref, ".json") {
			ref = join(ref, "tsconfig.json")
		}
		c.references = append(c.references, ref)
	}
	p.tsconfigs[file] = c
	return c
}

// extendsPath turns an "extends" value into a project path: relative to
// the config, or a file of a workspace package.
func (p *project) extendsPath(dir, ext string) string {
	if !strings.HasPrefix(ext, ".") && !strings.HasPrefix(ext, "/") {
		name := packageName(ext)
		wdir, ok := p.workspaces[name]
		if !ok {
			return "node_modules/" + ext // not in the project: skipped
		}
		sub := strings.TrimPrefix(strings.TrimPrefix(ext, name), "/")
		if sub == "" {
			sub = "tsconfig.json"
		}
		ext = "/" + join(wdir, sub)
		dir = "."
	}
	f := path.Clean(join(dir, strings.TrimPrefix(ext, "/")))
	if !strings.HasSuffix(f, ".json") && !p.exists[f] {
		f += ".json"
	}
	return f
}

// configFor is the tsconfig (or jsconfig) that governs file: the nearest
// one above it, or the one it refers to whose include holds the file.
func (p *project) configFor(file string) *tsconfig {
	var c *tsconfig
	up(path.Dir(file), func(dir string) bool {
		for _, name := range []string{"tsconfig.json", "jsconfig.json"} {
			if f := join(dir, name); p.exists[f] {
				c = p.config(f, 0)
				if c != nil {
					return true
				}
			}
		}
		return false
	})
	if c == nil {
		return nil
	}
	for _, ref := range c.references {
		if rc := p.config(ref, 0); rc != nil && rc.holds(file) {
			return rc
		}
	}
	return c
}

// holds reports whether a config's include or files name file.
func (c *tsconfig) holds(file string) bool {
	for _, f := range c.files {
		if f == file {
			return true
		}
	}
	for _, g := range c.include {
		if globMatch(g, file) || (!strings.ContainsAny(path.Base(g), "*?.") && strings.HasPrefix(file, g+"/")) {
			return true
		}
		if strings.HasSuffix(g, "/*") && globMatch(strings.TrimSuffix(g, "*")+"**/*", file) {
			return true
		}
	}
	return false
}

// jsonc strips the comments and trailing commas tsconfig files allow.
func jsonc(b []byte) []byte {
	noComments := outsideStrings(b, func(b []byte, i int, out []byte) ([]byte, int) {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			return out, i
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			end := strings.Index(string(b[i+2:]), "*/")
			if end < 0 {
				return out, len(b)
			}
			return append(out, ' '), i + 2 + end + 2
		}
		return append(out, b[i]), i + 1
	})
	return outsideStrings(noComments, func(b []byte, i int, out []byte) ([]byte, int) {
		if b[i] == ',' {
			j := i + 1
			for j < len(b) && strings.IndexByte(" \t\r\n", b[j]) >= 0 {
				j++
			}
			if j == len(b) || b[j] == '}' || b[j] == ']' {
				return out, i + 1
			}
		}
		return append(out, b[i]), i + 1
	})
}

// outsideStrings copies JSON text: strings as they are, every other byte
// through fn, which appends what it keeps and says where to go on.
func outsideStrings(b []byte, fn func(b []byte, i int, out []byte) ([]byte, int)) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] != '"' {
			out, i = fn(b, i, out)
			continue
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				j++
			}
			j++
		}
		j = min(j+1, len(b))
		out = append(out, b[i:j]...)
		i = j
	}
	return out
}
