package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// defaultRegistry is npm's public registry; lockfiles name it in their
// resolved URLs whatever registry installs from (npm rewrites its host to
// the configured registry).
const defaultRegistry = "https://registry.npmjs.org/"

// SourceError reports a dependency the install step refuses: anything
// but a package of the registry. A git repository, a local path or a
// tarball URL is code from outside the registry, and fetching it runs
// commands (git, and npm preparing the repository) or reaches hosts the
// install step must not reach.
type SourceError struct {
	File   string // package.json or the lockfile
	Name   string // the dependency (a lockfile's package path)
	Spec   string // what it names
	Reason string // what kind of source that is
}

func (e *SourceError) Error() string {
	return fmt.Sprintf("%s: dependency %q is %s (%q): only packages of the registry are installed", e.File, e.Name, e.Reason, e.Spec)
}

// rangeSpec is a semver range or a dist-tag: the registry's own specs.
var rangeSpec = regexp.MustCompile(`^[0-9A-Za-z.*^~<>=|\- +]*$`)

// specSource says what a dependency spec of package.json names: "" for a
// registry version, range or tag, else the kind of source it is.
func specSource(spec string) string {
	spec = strings.TrimSpace(spec)
	if alias, ok := strings.CutPrefix(spec, "npm:"); ok {
		// npm:name@range, name possibly scoped.
		at := strings.LastIndex(alias, "@")
		if at <= 0 {
			return ""
		}
		return specSource(alias[at+1:])
	}
	if rangeSpec.MatchString(spec) {
		return ""
	}
	lower := strings.ToLower(spec)
	switch {
	case strings.HasPrefix(lower, "http:"), strings.HasPrefix(lower, "https:"):
		return "a tarball URL"
	case strings.HasPrefix(lower, "file:"), strings.HasPrefix(lower, "link:"), strings.HasPrefix(lower, "workspace:"),
		strings.HasPrefix(lower, "."), strings.HasPrefix(lower, "/"), strings.HasPrefix(lower, "~"):
		return "a local path"
	case strings.HasPrefix(lower, "git"), strings.HasPrefix(lower, "gitlab:"), strings.HasPrefix(lower, "bitbucket:"),
		strings.HasPrefix(lower, "gist:"), strings.Contains(lower, "/"), strings.Contains(lower, "#"):
		return "a git repository"
	}
	return "not a registry version"
}

// depFields are the dependency lists of package.json and of a lockfile's
// packages.
var depFields = []string{"dependencies", "devDependencies", "optionalDependencies", "peerDependencies"}

// checkSources refuses a project whose package.json or lockfile names a
// dependency from outside the registry, or a lockfile whose resolved URL
// lies outside it, or either file when npm could read it otherwise than
// this check does (a *ManifestError). registry ends with a slash.
func checkSources(pkg []byte, lockName string, lock []byte, registry string) error {
	const file = "package.json"
	doc, err := parseManifest(file, pkg)
	if err != nil {
		return err
	}
	p, ok := doc.(map[string]any)
	if !ok {
		return wrongType(file, ".", "an object", doc)
	}
	for _, k := range depFields {
		deps, err := specsField(file, ".", p, k)
		if err != nil {
			return err
		}
		if err := checkSpecs(file, deps); err != nil {
			return err
		}
	}
	if overrides, ok := p["overrides"]; ok {
		if err := checkOverrides(".overrides", overrides); err != nil {
			return err
		}
	}
	if lockName == "" {
		return nil
	}
	doc, err = parseManifest(lockName, lock)
	if err != nil {
		return err
	}
	l, ok := doc.(map[string]any)
	if !ok {
		return wrongType(lockName, ".", "an object", doc)
	}
	packages, _, err := field[map[string]any](lockName, ".", l, "packages", "an object")
	if err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(packages)) {
		if err := checkLockPackage(lockName, key, packages[key], registry); err != nil {
			return err
		}
	}
	deps, _, err := field[map[string]any](lockName, ".", l, "dependencies", "an object")
	if err != nil {
		return err
	}
	return checkLockDeps(lockName, ".dependencies", "", deps, registry)
}

// checkLockPackage checks the entry key of a lockfile's packages.
func checkLockPackage(file, key string, entry any, registry string) error {
	path := member(".packages", key)
	pk, ok := entry.(map[string]any)
	if !ok {
		return wrongType(file, path, "an object", entry)
	}
	if key == "" {
		for _, k := range depFields {
			deps, err := specsField(file, path, pk, k)
			if err != nil {
				return err
			}
			if err := checkSpecs(file, deps); err != nil {
				return err
			}
		}
		return nil
	}
	version, _, err := field[string](file, path, pk, "version", "a string")
	if err != nil {
		return err
	}
	resolved, _, err := field[string](file, path, pk, "resolved", "a string")
	if err != nil {
		return err
	}
	link, _, err := field[bool](file, path, pk, "link", "true or false")
	if err != nil {
		return err
	}
	switch {
	case !strings.HasPrefix(key, "node_modules/"):
		return &SourceError{File: file, Name: key, Spec: key, Reason: "a local path"}
	case link:
		return &SourceError{File: file, Name: key, Spec: resolved, Reason: "a local path"}
	case resolved != "" && !inRegistry(resolved, registry):
		return &SourceError{File: file, Name: key, Spec: resolved, Reason: "resolved outside the registry"}
	}
	if r := specSource(version); r != "" {
		return &SourceError{File: file, Name: key, Spec: version, Reason: r}
	}
	return nil
}

// checkLockDeps checks a version 1 lockfile's nested dependencies (at
// path), each an object of version, resolved and its own dependencies.
func checkLockDeps(file, path, parent string, deps map[string]any, registry string) error {
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		at := member(path, name)
		d, ok := deps[name].(map[string]any)
		if !ok {
			return wrongType(file, at, "an object", deps[name])
		}
		version, _, err := field[string](file, at, d, "version", "a string")
		if err != nil {
			return err
		}
		resolved, _, err := field[string](file, at, d, "resolved", "a string")
		if err != nil {
			return err
		}
		nested, _, err := field[map[string]any](file, at, d, "dependencies", "an object")
		if err != nil {
			return err
		}
		name := parent + name
		if resolved != "" && !inRegistry(resolved, registry) {
			return &SourceError{File: file, Name: name, Spec: resolved, Reason: "resolved outside the registry"}
		}
		if r := specSource(version); r != "" {
			return &SourceError{File: file, Name: name, Spec: version, Reason: r}
		}
		if err := checkLockDeps(file, member(at, "dependencies"), name+" > ", nested, registry); err != nil {
			return err
		}
	}
	return nil
}

func checkSpecs(file string, deps map[string]any) error {
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		spec, ok := deps[name].(string)
		if !ok {
			b, _ := json.Marshal(deps[name])
			return &SourceError{File: file, Name: name, Spec: string(b), Reason: "not a version string"}
		}
		if r := specSource(spec); r != "" {
			return &SourceError{File: file, Name: name, Spec: spec, Reason: r}
		}
	}
	return nil
}

// checkOverrides checks the specs of package.json's overrides (at path): a
// spec, or an object whose "." or package keys name specs or nest further
// ("$name" refers to a direct dependency's spec, already checked).
func checkOverrides(path string, v any) error {
	switch o := v.(type) {
	case string:
		if strings.HasPrefix(o, "$") {
			return nil
		}
		if r := specSource(o); r != "" {
			return &SourceError{File: "package.json", Name: "overrides", Spec: o, Reason: r}
		}
		return nil
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(o)) {
			if err := checkOverrides(member(path, k), o[k]); err != nil {
				return err
			}
		}
		return nil
	}
	return wrongType("package.json", path, "a version string or an object of them", v)
}

// inRegistry reports whether a resolved URL is a file of the registry (or
// of npm's public registry, whose host npm replaces by the registry's).
func inRegistry(resolved, registry string) bool {
	u, err := url.Parse(resolved)
	if err != nil || u.User != nil || u.Host == "" {
		return false
	}
	for _, r := range []string{registry, defaultRegistry} {
		base, err := url.Parse(r)
		if err != nil {
			continue
		}
		if strings.EqualFold(u.Scheme, base.Scheme) && strings.EqualFold(u.Host, base.Host) &&
			strings.HasPrefix(u.EscapedPath(), strings.TrimSuffix(base.EscapedPath(), "/")+"/") {
			return true
		}
	}
	return false
}
