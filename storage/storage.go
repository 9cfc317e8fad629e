// Package storage holds the project file store: one contract (Store) with an
// S3 implementation (minio-go) and a local-directory implementation. A project
// is its id; its files live under "<project_id>/<path>".
package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotFound reports that a file does not exist in the project.
	ErrNotFound = errors.New("file not found")
	// ErrExists reports that a target file already exists and overwrite was not asked for.
	ErrExists = errors.New("file already exists")
	// ErrInvalidPath reports a path that escapes the project or is malformed.
	ErrInvalidPath = errors.New("invalid path")
	// ErrConflict reports a write against a version of a file that is no
	// longer current: someone else changed it meanwhile.
	ErrConflict = errors.New("file changed meanwhile")
	// ErrUnavailable reports a store that could not be reached (refused or
	// reset connections, timeouts, 5xx answers, throttling) for as long as
	// the store retries. It is the service's business, never the model's:
	// the task is handed back and retried.
	ErrUnavailable = errors.New("file store unavailable")
)

// errNoVersion refuses a conditional delete without a version: there is
// no "delete only if missing".
var errNoVersion = fmt.Errorf("a conditional delete needs the version to delete: %w", ErrInvalidPath)

// ConflictError is an ErrConflict with the file's current state, so the
// writer can redo its change against it. Current is nil and Exists false
// when the file was deleted meanwhile.
type ConflictError struct {
	Path    string
	Exists  bool
	Current []byte
	ETag    string
}

func (e *ConflictError) Error() string {
	if !e.Exists {
		return "conflict on " + e.Path + ": the file was deleted meanwhile"
	}
	return "conflict on " + e.Path + ": the file changed meanwhile (now version " + e.ETag + ")"
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// conflict builds the ConflictError of path from its current state, as read
// by read. A failing read still reports the conflict.
func conflict(path string, read func() ([]byte, FileInfo, error)) error {
	content, info, err := read()
	switch {
	case errors.Is(err, ErrNotFound):
		return &ConflictError{Path: path}
	case err != nil:
		return fmt.Errorf("%w; reading its current state failed: %w", ErrConflict, err)
	}
	return &ConflictError{Path: path, Exists: true, Current: content, ETag: info.ETag}
}

// FileInfo describes one stored file. Path is relative to the project root,
// slash-separated, without a leading slash.
type FileInfo struct {
	Path string
	Size int64
	ETag string // content version: S3 ETag, or a content hash for the local store
	// ModTime is when the file was last written, as the store records it;
	// in the info a write returns, where the store's answer does not say
	// (an S3 PUT), when the store acknowledged the write by the writer's
	// clock.
	ModTime time.Time
}

// Store is the project file store. The one deliberate seam of the service:
// S3 in production, a local directory as the embedded default, and a
// build's change set over either. Every implementation runs the
// conformance suite in package storagetest.
type Store interface {
	// Read returns the content and info of a file, or ErrNotFound.
	Read(ctx context.Context, projectID, path string) ([]byte, FileInfo, error)
	// Write creates or replaces a file.
	Write(ctx context.Context, projectID, path string, content []byte) (FileInfo, error)
	// WriteIf writes a file only if it is still at the version ifMatch (an
	// ETag the caller got from Read, Stat, List or a write), or, when ifMatch
	// is "", only if it does not exist. Otherwise nothing is written and the
	// error is a *ConflictError (errors.Is ErrConflict) with the file's
	// current state. The check and the write are one atomic step.
	WriteIf(ctx context.Context, projectID, path string, content []byte, ifMatch string) (FileInfo, error)
	// Delete removes a file, or returns ErrNotFound.
	Delete(ctx context.Context, projectID, path string) error
	// DeleteIf removes a file only if it is still at version ifMatch (not
	// ""). Otherwise nothing is deleted and the error is a *ConflictError
	// with the file's current state (Exists false when it is gone). The
	// stores make the check and the delete as nearly one step as they can:
	// see each implementation.
	DeleteIf(ctx context.Context, projectID, path, ifMatch string) error
	// Stat returns a file's info, or ErrNotFound.
	Stat(ctx context.Context, projectID, path string) (FileInfo, error)
	// List returns every file under dir, recursively, sorted by path. dir
	// is cleaned like a path: "", "." and "/" name the whole project, and
	// "./a/" is "a".
	List(ctx context.Context, projectID, dir string) ([]FileInfo, error)
	// Move renames a file: ErrNotFound when from is missing, ErrExists when
	// to exists and overwrite is false.
	Move(ctx context.Context, projectID, from, to string, overwrite bool) error
}

// Upserter is a Store whose writes tell whether they created the file,
// from the lookup the write makes anyway (a build's change set looks up
// the version a first change is made against).
type Upserter interface {
	// Upsert is Write, reporting whether the file did not exist before.
	Upsert(ctx context.Context, projectID, path string, content []byte) (info FileInfo, created bool, err error)
}

// Upsert creates or replaces a file and reports whether it created it:
// with one lookup fewer where s is an Upserter, else by a Stat before the
// write.
func Upsert(ctx context.Context, s Store, projectID, path string, content []byte) (info FileInfo, created bool, err error) {
	if u, ok := s.(Upserter); ok {
		return u.Upsert(ctx, projectID, path, content)
	}
	if _, err := s.Stat(ctx, projectID, path); errors.Is(err, ErrNotFound) {
		created = true
	} else if err != nil {
		return FileInfo{}, false, err
	}
	info, err = s.Write(ctx, projectID, path, content)
	return info, created, err
}
