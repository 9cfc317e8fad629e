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

// checkSources refuses a project whose package.json or lockfile names a
// dependency from outside the registry, or a lockfile whose resolved URL
// lies outside it. registry ends with a slash.
func checkSources(pkg []byte, lockName string, lock []byte, registry string) error {
	var p struct {
		Deps      map[string]json.RawMessage `json:"dependencies"`
		Dev       map[string]json.RawMessage `json:"devDependencies"`
		Optional  map[string]json.RawMessage `json:"optionalDependencies"`
		Peer      map[string]json.RawMessage `json:"peerDependencies"`
		Overrides json.RawMessage            `json:"overrides"`
	}
	if json.Unmarshal(pkg, &p) != nil {
		return nil // npm says what is wrong with it
	}
	for _, deps := range []map[string]json.RawMessage{p.Deps, p.Dev, p.Optional, p.Peer} {
		if err := checkSpecs("package.json", deps); err != nil {
			return err
		}
	}
	if err := checkOverrides(p.Overrides); err != nil {
		return err
	}
	if lockName == "" {
		return nil
	}
	var l struct {
		Packages map[string]lockPackage `json:"packages"`
		Deps     map[string]lockDep     `json:"dependencies"`
	}
	if json.Unmarshal(lock, &l) != nil {
		return nil // npm ci refuses it
	}
	for _, key := range slices.Sorted(maps.Keys(l.Packages)) {
		pk := l.Packages[key]
		if key == "" {
			for _, deps := range []map[string]json.RawMessage{pk.Deps, pk.Dev, pk.Optional, pk.Peer} {
				if err := checkSpecs(lockName, deps); err != nil {
					return err
				}
			}
			continue
		}
		switch {
		case !strings.HasPrefix(key, "node_modules/"):
			return &SourceError{File: lockName, Name: key, Spec: key, Reason: "a local path"}
		case pk.Link:
			return &SourceError{File: lockName, Name: key, Spec: pk.Resolved, Reason: "a local path"}
		case pk.Resolved != "" && !inRegistry(pk.Resolved, registry):
			return &SourceError{File: lockName, Name: key, Spec: pk.Resolved, Reason: "resolved outside the registry"}
		}
		if r := specSource(pk.Version); r != "" {
			return &SourceError{File: lockName, Name: key, Spec: pk.Version, Reason: r}
		}
	}
	return checkLockDeps(lockName, "", l.Deps, registry)
}

type lockPackage struct {
	Version  string                     `json:"version"`
	Resolved string                     `json:"resolved"`
	Link     bool                       `json:"link"`
	Deps     map[string]json.RawMessage `json:"dependencies"`
	Dev      map[string]json.RawMessage `json:"devDependencies"`
	Optional map[string]json.RawMessage `json:"optionalDependencies"`
	Peer     map[string]json.RawMessage `json:"peerDependencies"`
}

// lockDep is an entry of a version 1 lockfile's nested dependencies.
type lockDep struct {
	Version  string             `json:"version"`
	Resolved string             `json:"resolved"`
	Deps     map[string]lockDep `json:"dependencies"`
}

func checkLockDeps(file, parent string, deps map[string]lockDep, registry string) error {
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		d := deps[name]
		path := parent + name
		if d.Resolved != "" && !inRegistry(d.Resolved, registry) {
			return &SourceError{File: file, Name: path, Spec: d.Resolved, Reason: "resolved outside the registry"}
		}
		if r := specSource(d.Version); r != "" {
			return &SourceError{File: file, Name: path, Spec: d.Version, Reason: r}
		}
		if err := checkLockDeps(file, path+" > ", d.Deps, registry); err != nil {
			return err
		}
	}
	return nil
}

func checkSpecs(file string, deps map[string]json.RawMessage) error {
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		var spec string
		if json.Unmarshal(deps[name], &spec) != nil {
			return &SourceError{File: file, Name: name, Spec: string(deps[name]), Reason: "not a version string"}
		}
		if r := specSource(spec); r != "" {
			return &SourceError{File: file, Name: name, Spec: spec, Reason: r}
		}
	}
	return nil
}

// checkOverrides checks the specs of package.json's overrides, nested
// objects whose "." or package keys name specs ("$name" refers to a
// direct dependency's spec, already checked).
func checkOverrides(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var spec string
	if json.Unmarshal(raw, &spec) == nil {
		if strings.HasPrefix(spec, "$") {
			return nil
		}
		if r := specSource(spec); r != "" {
			return &SourceError{File: "package.json", Name: "overrides", Spec: spec, Reason: r}
		}
		return nil
	}
	var nested map[string]json.RawMessage
	if json.Unmarshal(raw, &nested) != nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(nested)) {
		if err := checkOverrides(nested[k]); err != nil {
			return err
		}
	}
	return nil
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
