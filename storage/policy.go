package storage

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// The file policy the tools apply on top of the path jail (CleanPath):
// sensitive files are refused for reading and writing, writes are confined
// to a task's allowed_paths scope, and reads and writes have size caps.

var (
	// ErrSensitive reports a path that names a secret-bearing file.
	ErrSensitive = errors.New("sensitive file")
	// ErrOutOfScope reports a path outside the task's allowed_paths.
	ErrOutOfScope = errors.New("path outside the task's allowed paths")
	// ErrTooLarge reports content over a size cap.
	ErrTooLarge = errors.New("file too large")
)

// Default size caps of reads and writes.
const (
	DefaultMaxReadBytes  = 1 << 20
	DefaultMaxWriteBytes = 1 << 20
)

// sensitiveNames are base names refused outright (compared in lower case).
var sensitiveNames = map[string]bool{
	".netrc": true, "_netrc": true, ".npmrc": true, ".pypirc": true, ".pgpass": true,
	".git-credentials": true, ".dockercfg": true, ".htpasswd": true, "credentials": true,
	"credentials.json": true, "service-account.json": true, "secrets.yml": true, "secrets.yaml": true,
	"authorized_keys": true, "known_hosts": true, "shadow": true, "master.key": true,
	"credentials.toml": true, "secrets.json": true, ".yarnrc": true, ".yarnrc.yml": true,
}

// sensitivePrefixes and sensitiveExts match base names by shape.
var (
	sensitivePrefixes = []string{".env", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"}
	sensitiveExts     = []string{".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".asc", ".gpg", ".ppk", ".tfstate", ".tfstate.backup", ".tfvars"}
	// sensitiveDirs are directories whose every file is refused.
	sensitiveDirs = map[string]bool{".ssh": true, ".gnupg": true, ".aws": true, ".docker": true, ".kube": true}
	// sensitivePaths are trailing segments refused at any depth: a
	// repository's config holds remote URLs with tokens in them.
	sensitivePaths = []string{".git/config"}
)

// CheckSensitive returns an error wrapping ErrSensitive when the
// project-relative path p names a file that commonly holds secrets: .env*,
// private keys and certificates (*.pem, *.key, *.p12, *.pfx, id_rsa*, …),
// credential stores (.netrc, .npmrc, .pypirc, .git-credentials, .git/config,
// *.kdbx, secrets.json, .yarnrc.yml, *.tfstate, …), or anything under
// .ssh, .gnupg, .aws, .docker or .kube. Case does not matter, nor does a
// compatibility form: the path is compared as NFKC renders it, so a
// full-width ".ｅnv" is ".env".
func CheckSensitive(p string) error {
	lower := strings.ToLower(norm.NFKC.String(p))
	for _, sp := range sensitivePaths {
		if lower == sp || strings.HasSuffix(lower, "/"+sp) {
			return fmt.Errorf("%s: %w", p, ErrSensitive)
		}
	}
	segs := strings.Split(lower, "/")
	for _, dir := range segs[:len(segs)-1] {
		if sensitiveDirs[dir] {
			return fmt.Errorf("%s: inside %s/: %w", p, dir, ErrSensitive)
		}
	}
	base := segs[len(segs)-1]
	if sensitiveNames[base] {
		return fmt.Errorf("%s: %w", p, ErrSensitive)
	}
	for _, pre := range sensitivePrefixes {
		if strings.HasPrefix(base, pre) {
			return fmt.Errorf("%s: %s* files hold secrets: %w", p, pre, ErrSensitive)
		}
	}
	for _, ext := range sensitiveExts {
		if strings.HasSuffix(base, ext) {
			return fmt.Errorf("%s: *%s files hold keys or secrets: %w", p, ext, ErrSensitive)
		}
	}
	return nil
}

// Scope is a task's allowed_paths: globs over project-relative paths, where
// "*", "?" and "[…]" match within one segment and "**" matches any number
// of segments ("src/**", "**/*.go", "docs/*.md"). The empty scope allows
// every path.
type Scope struct {
	patterns [][]string
	// outer is a scope this one was narrowed from: a path must be in both.
	outer *Scope
}

// NewScope validates the patterns.
func NewScope(patterns []string) (*Scope, error) {
	s := &Scope{}
	for _, p := range patterns {
		clean, err := CleanDir(strings.TrimSpace(p))
		if err != nil || clean == "" {
			return nil, fmt.Errorf("allowed path %q: not a project-relative pattern", p)
		}
		segs := strings.Split(clean, "/")
		for _, seg := range segs {
			if seg == "**" {
				continue
			}
			if strings.Contains(seg, "**") {
				return nil, fmt.Errorf("allowed path %q: ** must be a whole segment", p)
			}
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("allowed path %q: %w", p, err)
			}
		}
		s.patterns = append(s.patterns, segs)
	}
	return s, nil
}

// Within returns the scope of the paths in both s and outer: a scope can be
// narrowed by another, never widened.
func (s *Scope) Within(outer *Scope) *Scope {
	if s == nil {
		return outer
	}
	return &Scope{patterns: s.patterns, outer: outer.Within(s.outer)}
}

// Check returns an error wrapping ErrOutOfScope unless p, a cleaned
// project-relative path, matches one of the patterns.
func (s *Scope) Check(p string) error {
	if s == nil {
		return nil
	}
	if err := s.outer.Check(p); err != nil {
		return err
	}
	if len(s.patterns) == 0 {
		return nil
	}
	segs := strings.Split(p, "/")
	for _, pat := range s.patterns {
		if matchSegs(pat, segs) {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", p, ErrOutOfScope)
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// CheckSize returns a *TooLargeError when n bytes exceed max.
func CheckSize(p string, n, max int64) error {
	if n > max {
		return &TooLargeError{Path: p, Size: n, Max: max}
	}
	return nil
}

// TooLargeError is content over a size cap; it is ErrTooLarge.
type TooLargeError struct {
	Path      string
	Size, Max int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: %d bytes, over the %d-byte cap: %v", e.Path, e.Size, e.Max, ErrTooLarge)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

type readLimitKey struct{}

// WithReadLimit returns ctx bounding what a Read through it returns to max
// bytes: the S3 and local stores refuse a larger file with a
// *TooLargeError from the size they learn before its content, in the same
// request, without transferring it; the wrappers of a store (ListCache, a
// build's change set) pass ctx on. A bound carried by the context, not a
// parameter, so that every layer between a tool and the store need not
// know it.
func WithReadLimit(ctx context.Context, max int64) context.Context {
	return context.WithValue(ctx, readLimitKey{}, max)
}

// checkReadLimit refuses a file of size bytes at p when ctx bounds reads
// below that (WithReadLimit).
func checkReadLimit(ctx context.Context, p string, size int64) error {
	if max, ok := ctx.Value(readLimitKey{}).(int64); ok {
		return CheckSize(p, size, max)
	}
	return nil
}
