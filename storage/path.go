package storage

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Bounds of a path, what file systems (a name) and S3 (a key) hold: longer
// ones are refused before anything else reads them.
const (
	MaxNameBytes = 255  // one segment
	MaxPathBytes = 1024 // the whole cleaned path
)

// quote quotes p for an error, only its start when it is long: an error
// may be logged or answered, and a path can be megabytes.
func quote(p string) string {
	const keep = 96
	if len(p) <= keep {
		return fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("%q… (%d bytes)", p[:keep], len(p))
}

// CleanPath is the path jail: it normalises a project-relative file path or
// returns an error wrapping ErrInvalidPath. A leading "./", a trailing
// slash and doubled slashes are dropped and "a/../b" becomes "b"; the result is
// slash-separated, without a leading slash, and never the project root
// itself. Rejected: the empty path, absolute paths, ".." that climbs out of
// the project, backslashes, NUL and other control characters, invalid
// UTF-8, a segment over MaxNameBytes and a path over MaxPathBytes.
func CleanPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("clean path %q: empty: %w", p, ErrInvalidPath)
	}
	clean, err := cleanRel(p)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", fmt.Errorf("clean path %s: names the project root, not a file: %w", quote(p), ErrInvalidPath)
	}
	return clean, nil
}

// CleanDir is CleanPath for a directory: "", "." and "/" (and anything that
// cleans to them, like "a/..") name the project root and give "".
func CleanDir(p string) (string, error) {
	if p == "/" {
		return "", nil
	}
	return cleanRel(p)
}

// cleanRel normalises p and returns "" for the project root.
func cleanRel(p string) (string, error) {
	// "./" and doubled slashes are all cleaning can drop besides "a/..":
	// anything four times the bound is refused unread.
	if len(p) > 4*MaxPathBytes {
		return "", fmt.Errorf("clean path %s: longer than %d bytes: %w", quote(p), MaxPathBytes, ErrInvalidPath)
	}
	if err := checkChars(p); err != nil {
		return "", fmt.Errorf("clean path %s: %w", quote(p), err)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("clean path %s: absolute path: %w", quote(p), ErrInvalidPath)
	}
	// Not starting with "/", p cleans to a relative path; Clean also drops
	// a leading "./".
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("clean path %s: escapes the project: %w", quote(p), ErrInvalidPath)
	}
	if clean == "." {
		return "", nil
	}
	if len(clean) > MaxPathBytes {
		return "", fmt.Errorf("clean path %s: longer than %d bytes: %w", quote(p), MaxPathBytes, ErrInvalidPath)
	}
	for seg := range strings.SplitSeq(clean, "/") {
		if len(seg) > MaxNameBytes {
			return "", fmt.Errorf("clean path %s: a name longer than %d bytes: %w", quote(p), MaxNameBytes, ErrInvalidPath)
		}
	}
	return clean, nil
}

// checkChars rejects bytes that have no place in a portable object key.
func checkChars(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("invalid utf-8: %w", ErrInvalidPath)
	}
	for _, r := range s {
		switch {
		case r == 0:
			return fmt.Errorf("contains a nul byte: %w", ErrInvalidPath)
		case r == '\\':
			return fmt.Errorf("contains a backslash: %w", ErrInvalidPath)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("contains control character %U: %w", r, ErrInvalidPath)
		}
	}
	return nil
}

// checkProjectID accepts a project id usable as a single path segment and
// object-key prefix. Ids are uuids in practice; beyond the path rules a
// leading dot is refused so that "." never names the store root and the
// local store's staging directory never collides with a project, and a
// leading underscore so that the service's own objects (CheckServiceKey)
// never do.
func checkProjectID(id string) error {
	if id == "" {
		return fmt.Errorf("project id %q: empty: %w", id, ErrInvalidPath)
	}
	if err := checkChars(id); err != nil {
		return fmt.Errorf("project id %q: %w", id, err)
	}
	if strings.Contains(id, "/") || strings.Contains(id, "..") || strings.HasPrefix(id, ".") || strings.HasPrefix(id, "_") {
		return fmt.Errorf("project id %q: not a single plain path segment: %w", id, ErrInvalidPath)
	}
	return nil
}
