// Package corpus is test support for the edit tools: real edits, taken
// from the release-to-release diffs of Go modules and npm packages, and
// rendered in the forms a model sends them (see [Forms]).
//
// The repository keeps only a manifest: each package with two versions and
// the files that changed between them, with their SHA-256. The sources
// come from the registries through their own clients (go mod download,
// npm pack) and are kept under the user cache directory
// (os.UserCacheDir()/agentworker/corpus), so a warm cache needs no network.
package corpus

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Ecosystems of a Spec.
const (
	Go  = "go"
	NPM = "npm"
)

// Spec names two releases of one package.
type Spec struct {
	Ecosystem string `json:"ecosystem"`
	Name      string `json:"name"`
	From      string `json:"from"`
	To        string `json:"to"`
}

func (s Spec) String() string { return fmt.Sprintf("%s %s@%s..%s", s.Ecosystem, s.Name, s.From, s.To) }

// File is one changed file of a package, by the SHA-256 of its two versions.
type File struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// Package is a Spec with the files taken from it.
type Package struct {
	Spec
	Files []File `json:"files"`
}

// Manifest is the committed description of the corpus.
type Manifest struct {
	Packages []Package `json:"packages"`
}

// Edit is one file changed between two releases.
type Edit struct {
	Spec Spec
	Path string
	Old  string
	New  string
}

// Lang is the edit's language by extension: "go", "ts" or "js".
func (e Edit) Lang() string {
	switch path.Ext(e.Path) {
	case ".go":
		return "go"
	case ".ts", ".tsx", ".mts", ".cts":
		return "ts"
	}
	return "js"
}

// ErrUnavailable reports sources that are neither cached nor fetchable
// (no network, or no go or npm client).
var ErrUnavailable = errors.New("corpus sources unavailable")

// CacheDir is where fetched sources are kept.
func CacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("corpus cache: %w", err)
	}
	return filepath.Join(dir, "agentworker", "corpus"), nil
}

// ReadManifest reads a manifest file.
func ReadManifest(file string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(file)
	if err != nil {
		return m, fmt.Errorf("read corpus manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read corpus manifest %s: %w", file, err)
	}
	return m, nil
}

// Load returns the manifest's edits, fetching into the cache what is not
// there yet. Every file is checked against its checksum.
func Load(ctx context.Context, m Manifest, cache string) ([]Edit, error) {
	var edits []Edit
	for _, p := range m.Packages {
		for _, f := range p.Files {
			old, err := cached(ctx, cache, p.Spec, p.From, f.Path, f.Old)
			if err != nil {
				return nil, err
			}
			nw, err := cached(ctx, cache, p.Spec, p.To, f.Path, f.New)
			if err != nil {
				return nil, err
			}
			edits = append(edits, Edit{Spec: p.Spec, Path: f.Path, Old: old, New: nw})
		}
	}
	return edits, nil
}

// versionDir is where one version's sources are unpacked.
func versionDir(cache string, s Spec, version string) string {
	return filepath.Join(cache, s.Ecosystem, strings.ReplaceAll(s.Name, "/", "_")+"@"+version)
}

// cached returns one file of a version, fetching the version when the
// cache lacks the file or holds other bytes.
func cached(ctx context.Context, cache string, s Spec, version, file, sum string) (string, error) {
	p := filepath.Join(versionDir(cache, s, version), filepath.FromSlash(file))
	b, err := os.ReadFile(p)
	if err == nil && checksum(b) == sum {
		return string(b), nil
	}
	if err := fetch(ctx, cache, s, version); err != nil {
		return "", err
	}
	b, err = os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("corpus %s@%s: %s is not in the release: %w", s.Name, version, file, err)
	}
	if got := checksum(b); got != sum {
		return "", fmt.Errorf("corpus %s@%s: %s has checksum %s, the manifest says %s", s.Name, version, file, got, sum)
	}
	return string(b), nil
}

func checksum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// sourceExts are the files unpacked from a release: code, and the project
// files the static checks read.
var sourceExts = map[string]bool{".go": true, ".js": true, ".mjs": true, ".cjs": true, ".jsx": true,
	".ts": true, ".mts": true, ".cts": true, ".tsx": true, ".json": true, ".css": true}

// fetch downloads one version with the ecosystem's client and unpacks its
// source files into the cache.
func fetch(ctx context.Context, cache string, s Spec, version string) error {
	tmp, err := os.MkdirTemp("", "corpus-fetch-")
	if err != nil {
		return fmt.Errorf("corpus fetch: %w", err)
	}
	defer os.RemoveAll(tmp)
	var files map[string][]byte
	switch s.Ecosystem {
	case Go:
		files, err = fetchGo(ctx, tmp, s.Name, version)
	case NPM:
		files, err = fetchNPM(ctx, tmp, s.Name, version)
	default:
		return fmt.Errorf("corpus %s: unknown ecosystem %q", s, s.Ecosystem)
	}
	if err != nil {
		return err
	}
	// Unpacked beside its place and renamed into it, so that test
	// processes fetching the same version never see half of it.
	dir := versionDir(cache, s, version)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("corpus cache: %w", err)
	}
	part, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".part-")
	if err != nil {
		return fmt.Errorf("corpus cache: %w", err)
	}
	defer os.RemoveAll(part)
	for name, b := range files {
		p := filepath.Join(part, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("corpus cache: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("corpus cache: %w", err)
		}
	}
	old := dir + ".old-" + filepath.Base(part)
	if err := os.Rename(dir, old); err == nil {
		defer os.RemoveAll(old)
	}
	if err := os.Rename(part, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("corpus cache: %w", err)
		}
	}
	return nil
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not installed", ErrUnavailable, name)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s %s: %v: %s", ErrUnavailable, name, strings.Join(args, " "), err, strings.TrimSpace(lastLines(stderr.String(), 3)))
	}
	return out, nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(len(ls)-n, 0):], "\n")
}

// fetchGo downloads a module version with go mod download (which checks it
// against the checksum database) and reads its zip.
func fetchGo(ctx context.Context, tmp, module, version string) (map[string][]byte, error) {
	out, err := run(ctx, tmp, []string{"GOFLAGS=", "GO111MODULE=on"}, "go", "mod", "download", "-json", module+"@"+version)
	var info struct{ Zip, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return nil, fmt.Errorf("%w: go mod download %s@%s: %s", ErrUnavailable, module, version, info.Error)
	}
	if err != nil {
		return nil, err
	}
	zr, err := zip.OpenReader(info.Zip)
	if err != nil {
		return nil, fmt.Errorf("corpus %s@%s: open %s: %w", module, version, info.Zip, err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	for _, f := range zr.File {
		_, name, ok := strings.Cut(f.Name, "@"+version+"/")
		if !ok || !sourceExts[path.Ext(name)] || f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("corpus %s@%s: %s: %w", module, version, name, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, 4<<20))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("corpus %s@%s: %s: %w", module, version, name, err)
		}
		files[name] = b
	}
	return files, nil
}

// fetchNPM downloads a package version with npm pack (or, without npm,
// from the registry's tarball address, as npm does) and reads its tarball.
func fetchNPM(ctx context.Context, tmp, pkg, version string) (map[string][]byte, error) {
	tarball, err := npmPack(ctx, tmp, pkg, version)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(tarball)
	if err != nil {
		return nil, fmt.Errorf("corpus %s@%s: %w", pkg, version, err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("corpus %s@%s: %w", pkg, version, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("corpus %s@%s: %w", pkg, version, err)
		}
		_, name, ok := strings.Cut(h.Name, "/") // the tarball's top folder, usually package/
		if !ok || h.Typeflag != tar.TypeReg || !sourceExts[path.Ext(name)] {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 4<<20))
		if err != nil {
			return nil, fmt.Errorf("corpus %s@%s: %s: %w", pkg, version, name, err)
		}
		files[name] = b
	}
	return files, nil
}

func npmPack(ctx context.Context, tmp, pkg, version string) (string, error) {
	if _, err := exec.LookPath("npm"); err != nil {
		registry := strings.TrimSuffix(os.Getenv("npm_config_registry"), "/")
		if registry == "" {
			registry = "https://registry.npmjs.org"
		}
		_, base, _ := strings.Cut(pkg, "/")
		if !strings.HasPrefix(pkg, "@") {
			base = pkg
		}
		url := fmt.Sprintf("%s/%s/-/%s-%s.tgz", registry, pkg, base, version)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", fmt.Errorf("corpus %s@%s: %w", pkg, version, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", fmt.Errorf("%w: GET %s: %v", ErrUnavailable, url, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%w: GET %s: %s", ErrUnavailable, url, resp.Status)
		}
		file := filepath.Join(tmp, "package.tgz")
		f, err := os.Create(file)
		if err != nil {
			return "", fmt.Errorf("corpus %s@%s: %w", pkg, version, err)
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			return "", fmt.Errorf("%w: GET %s: %v", ErrUnavailable, url, err)
		}
		return file, f.Close()
	}
	out, err := run(ctx, tmp, nil, "npm", "pack", "--json", "--ignore-scripts", "--fetch-retries=1", "--fetch-timeout=30000", "--pack-destination", tmp, pkg+"@"+version)
	if err != nil {
		return "", err
	}
	var packed []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		return "", fmt.Errorf("%w: npm pack %s@%s: unexpected output %q", ErrUnavailable, pkg, version, lastLines(string(out), 3))
	}
	return filepath.Join(tmp, packed[0].Filename), nil
}

// Selection bounds the files Build takes from a package.
type Selection struct {
	PerPackage   int // at most this many files a package (evenly spread by path)
	MaxBytes     int // larger files are left out
	MaxChanged   int // files with more changed lines are left out
	MaxLineBytes int // files with longer lines (minified code) are left out
}

// Build fetches each spec and picks the code files changed between its
// versions, for a new manifest.
func Build(ctx context.Context, specs []Spec, cache string, sel Selection) (Manifest, error) {
	var m Manifest
	for _, s := range specs {
		for _, v := range []string{s.From, s.To} {
			if err := fetch(ctx, cache, s, v); err != nil {
				return m, err
			}
		}
		oldDir, newDir := versionDir(cache, s, s.From), versionDir(cache, s, s.To)
		var picked []File
		err := filepath.WalkDir(oldDir, func(p string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(oldDir, p)
			rel = filepath.ToSlash(rel)
			if path.Ext(rel) == ".json" || path.Ext(rel) == ".css" || strings.Contains(rel, ".min.") || strings.Contains(rel, "testdata/") {
				return nil
			}
			old, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			nw, err := os.ReadFile(filepath.Join(newDir, filepath.FromSlash(rel)))
			if err != nil || bytes.Equal(old, nw) || !fits(old, nw, sel) {
				return nil
			}
			picked = append(picked, File{Path: rel, Old: checksum(old), New: checksum(nw)})
			return nil
		})
		if err != nil {
			return m, fmt.Errorf("corpus %s: %w", s, err)
		}
		sort.Slice(picked, func(i, j int) bool { return picked[i].Path < picked[j].Path })
		if sel.PerPackage > 0 && len(picked) > sel.PerPackage {
			spread := make([]File, sel.PerPackage)
			for i := range spread {
				spread[i] = picked[i*len(picked)/sel.PerPackage]
			}
			picked = spread
		}
		m.Packages = append(m.Packages, Package{Spec: s, Files: picked})
	}
	return m, nil
}

func fits(old, nw []byte, sel Selection) bool {
	if !utf8.Valid(old) || !utf8.Valid(nw) || bytes.IndexByte(old, 0) >= 0 || bytes.IndexByte(nw, 0) >= 0 {
		return false
	}
	if sel.MaxBytes > 0 && (len(old) > sel.MaxBytes || len(nw) > sel.MaxBytes) {
		return false
	}
	for _, b := range [][]byte{old, nw} {
		for _, l := range bytes.Split(b, []byte("\n")) {
			if sel.MaxLineBytes > 0 && len(l) > sel.MaxLineBytes {
				return false
			}
		}
	}
	if sel.MaxChanged > 0 {
		changed := 0
		for _, o := range script(lines(string(old)), lines(string(nw))) {
			if o.Op != ' ' {
				changed++
			}
		}
		if changed > sel.MaxChanged {
			return false
		}
	}
	return true
}

// Files returns the source files of one version from the cache, fetching
// it when needed: the project a file of the corpus lives in.
func Files(ctx context.Context, cache string, s Spec, version string) (map[string]string, error) {
	dir := versionDir(cache, s, version)
	if _, err := os.Stat(dir); err != nil {
		if err := fetch(ctx, cache, s, version); err != nil {
			return nil, err
		}
	}
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("corpus %s@%s: %w", s.Name, version, err)
	}
	return out, nil
}
