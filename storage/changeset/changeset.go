// Package changeset stages a build's file changes in the database and
// applies them to the project's store only when the build succeeds.
//
// A [Set] is a [storage.Store] for one project: reads see the base store
// overlaid with the pending changes, writes go to the change_set_entries
// table. Every write is optimistic: it is made against the version of the
// file the agent last read (or, for a file it never read, the version when
// the build first touched it), and a write over a file someone else changed
// meanwhile is refused with a [*storage.ConflictError] carrying the fresh
// content. [Set.Apply] checks every base version before it writes anything,
// and is idempotent: after a crash half-way it finishes the job.
package changeset

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Set is the change set of one build task, seen as the project's store.
type Set struct {
	pool      *pgxpool.Pool
	base      storage.Store
	taskID    uuid.UUID
	projectID string

	mu   sync.Mutex
	seen map[string]string // path → base version the agent last read
	// staged mirrors this task's change_set_entries between writes: the Set
	// is their only writer while its attempt runs, so reads (every Read,
	// Stat and List of the build) need not query them each time. A write
	// drops the mirror; the next read loads it again.
	staged []agentsql.ChangeEntry // in ord order; nil: not loaded
	// writing makes concurrent WriteIf calls check and stage one at a time
	// (a plain Write does not wait for it; a build runs its tools in turn).
	writing sync.Mutex
}

// Open opens (or, for a retried attempt, reopens) the change set of a build
// task and returns it with its status (sql.ChangeSetOpen, ...).
func Open(ctx context.Context, pool *pgxpool.Pool, base storage.Store, taskID, projectID uuid.UUID) (*Set, string, error) {
	status, err := agentsql.OpenChangeSet(ctx, pool, taskID, projectID)
	if err != nil {
		return nil, "", err
	}
	return &Set{pool: pool, base: base, taskID: taskID, projectID: projectID.String(), seen: map[string]string{}}, status, nil
}

// Reset empties the change set, for a build that starts over.
func (s *Set) Reset(ctx context.Context) error {
	s.mu.Lock()
	s.seen = map[string]string{}
	s.staged = nil
	s.mu.Unlock()
	return agentsql.ResetChangeSet(ctx, s.pool, s.taskID)
}

// Entries returns the pending changes in the order they were first made.
func (s *Set) Entries(ctx context.Context) ([]agentsql.ChangeEntry, error) {
	s.mu.Lock()
	staged := s.staged
	s.mu.Unlock()
	if staged == nil {
		loaded, err := agentsql.ListChangeEntries(ctx, s.pool, s.taskID)
		if err != nil {
			return nil, err
		}
		staged = append([]agentsql.ChangeEntry{}, loaded...) // non-nil: loaded
		s.mu.Lock()
		s.staged = staged
		s.mu.Unlock()
	}
	return append([]agentsql.ChangeEntry(nil), staged...), nil
}

// changed drops the mirror of the entries after a write.
func (s *Set) changed() {
	s.mu.Lock()
	s.staged = nil
	s.mu.Unlock()
}

// Discard drops the pending changes; the project stays as it was.
func (s *Set) Discard(ctx context.Context) error {
	return agentsql.FinishChangeSet(ctx, s.pool, s.taskID, agentsql.ChangeSetDiscarded)
}

// Version returns the version a staged content is reported with.
func Version(content []byte) string {
	sum := sha256.Sum256(content)
	return "staged-" + hex.EncodeToString(sum[:8])
}

func (s *Set) check(projectID string) error {
	if projectID != s.projectID {
		return fmt.Errorf("change set of project %s used for project %q: %w", s.projectID, projectID, storage.ErrInvalidPath)
	}
	return nil
}

func (s *Set) entry(ctx context.Context, p string) (agentsql.ChangeEntry, bool, error) {
	entries, err := s.Entries(ctx)
	if err != nil {
		return agentsql.ChangeEntry{}, false, err
	}
	for _, e := range entries {
		if e.Path == p {
			return e, true, nil
		}
	}
	return agentsql.ChangeEntry{}, false, nil
}

func stagedInfo(e agentsql.ChangeEntry) storage.FileInfo {
	return storage.FileInfo{Path: e.Path, Size: int64(len(e.Content)), ETag: Version(e.Content), ModTime: time.Now()}
}

// Read implements storage.Store: the pending content, or the base file.
func (s *Set) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return nil, storage.FileInfo{}, err
	}
	e, ok, err := s.entry(ctx, clean)
	if err != nil {
		return nil, storage.FileInfo{}, err
	}
	if ok {
		if e.Op == agentsql.ChangeDelete {
			return nil, storage.FileInfo{}, fmt.Errorf("read %q: deleted in this build: %w", clean, storage.ErrNotFound)
		}
		return e.Content, stagedInfo(e), nil
	}
	content, info, err := s.base.Read(ctx, projectID, clean)
	if err != nil {
		return nil, info, err
	}
	s.mu.Lock()
	s.seen[clean] = info.ETag
	s.mu.Unlock()
	return content, info, nil
}

// Stat implements storage.Store.
func (s *Set) Stat(ctx context.Context, projectID, p string) (storage.FileInfo, error) {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return storage.FileInfo{}, err
	}
	e, ok, err := s.entry(ctx, clean)
	if err != nil {
		return storage.FileInfo{}, err
	}
	if ok {
		if e.Op == agentsql.ChangeDelete {
			return storage.FileInfo{}, fmt.Errorf("stat %q: deleted in this build: %w", clean, storage.ErrNotFound)
		}
		return stagedInfo(e), nil
	}
	return s.base.Stat(ctx, projectID, clean)
}

// List implements storage.Store: the base listing with the pending changes
// applied.
func (s *Set) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	if err := s.check(projectID); err != nil {
		return nil, err
	}
	files, err := s.base.List(ctx, projectID, dir)
	if err != nil {
		return nil, err
	}
	entries, err := s.Entries(ctx)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return files, nil
	}
	byPath := map[string]storage.FileInfo{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	// Entries hold clean paths: match them against the clean dir ("." and
	// "/" name the root, as for the base store).
	prefix, err := storage.CleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir, err)
	}
	if prefix != "" {
		prefix += "/"
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Path, prefix) {
			continue
		}
		if e.Op == agentsql.ChangeDelete {
			delete(byPath, e.Path)
			continue
		}
		byPath[e.Path] = stagedInfo(e)
	}
	out := make([]storage.FileInfo, 0, len(byPath))
	for _, f := range byPath {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Write implements storage.Store: it stages the new content.
func (s *Set) Write(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, error) {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return storage.FileInfo{}, err
	}
	e := agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeWrite, Content: content}
	if err := s.stage(ctx, s.pool, &e); err != nil {
		return storage.FileInfo{}, fmt.Errorf("write %q: %w", clean, err)
	}
	return stagedInfo(e), nil
}

// WriteIf implements storage.Store: it stages content only if the file, as
// this build sees it (its staged state, else the base file), is still at
// version ifMatch ("" for a file that must not exist).
func (s *Set) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return storage.FileInfo{}, err
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	cur, err := s.Stat(ctx, projectID, clean)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		if ifMatch != "" {
			return storage.FileInfo{}, fmt.Errorf("write %q: %w", clean, &storage.ConflictError{Path: clean})
		}
	case err != nil:
		return storage.FileInfo{}, fmt.Errorf("write %q: %w", clean, err)
	case cur.ETag != ifMatch:
		content, info, err := s.Read(ctx, projectID, clean)
		if err != nil {
			return storage.FileInfo{}, fmt.Errorf("write %q: %w: %w", clean, storage.ErrConflict, err)
		}
		return storage.FileInfo{}, fmt.Errorf("write %q: %w", clean, &storage.ConflictError{Path: clean, Exists: true, Current: content, ETag: info.ETag})
	}
	return s.Write(ctx, projectID, clean, content)
}

// Delete implements storage.Store: it stages the deletion.
func (s *Set) Delete(ctx context.Context, projectID, p string) error {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return err
	}
	return s.del(ctx, s.pool, clean)
}

func (s *Set) del(ctx context.Context, db agentsql.DBTX, clean string) error {
	defer s.changed()
	prev, ok, err := agentsql.GetChangeEntry(ctx, db, s.taskID, clean)
	if err != nil {
		return err
	}
	if ok {
		switch {
		case prev.Op == agentsql.ChangeDelete:
			return fmt.Errorf("delete %q: %w", clean, storage.ErrNotFound)
		case prev.BaseETag == "":
			// Created in this build: deleting it cancels the change.
			return agentsql.DropChangeEntry(ctx, db, s.taskID, clean)
		}
	} else if _, err := s.base.Stat(ctx, s.projectID, clean); err != nil {
		// Untouched by this build and missing from the base (ErrNotFound):
		// there is nothing to delete, and no delete to stage.
		return fmt.Errorf("delete %q: %w", clean, err)
	}
	e := agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeDelete}
	if err := s.stage(ctx, db, &e); err != nil {
		return fmt.Errorf("delete %q: %w", clean, err)
	}
	return nil
}

// Move implements storage.Store: a staged write of the target (recording
// its source) and a staged delete of the source, in one transaction.
func (s *Set) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	cfrom, err := s.clean(projectID, from)
	if err != nil {
		return err
	}
	cto, err := s.clean(projectID, to)
	if err != nil {
		return err
	}
	content, _, err := s.Read(ctx, projectID, cfrom)
	if err != nil {
		return fmt.Errorf("move %q: %w", cfrom, err)
	}
	if cfrom == cto {
		// The target is the source, so it exists.
		if !overwrite {
			return fmt.Errorf("move to %q: %w", cto, storage.ErrExists)
		}
		return nil
	}
	if _, err := s.Stat(ctx, projectID, cto); err == nil && !overwrite {
		return fmt.Errorf("move to %q: %w", cto, storage.ErrExists)
	} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("move to %q: %w", cto, err)
	}
	defer s.changed() // also when the transaction rolls back
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		e := agentsql.ChangeEntry{Path: cto, Op: agentsql.ChangeWrite, Content: content, FromPath: cfrom}
		if err := s.stage(ctx, tx, &e); err != nil {
			return fmt.Errorf("move to %q: %w", cto, err)
		}
		return s.del(ctx, tx, cfrom)
	})
}

// stage records e, setting its base version for a path the build has not
// touched yet, and refusing the change when the file changed since the
// agent read it.
func (s *Set) stage(ctx context.Context, db agentsql.DBTX, e *agentsql.ChangeEntry) error {
	defer s.changed()
	prev, ok, err := agentsql.GetChangeEntry(ctx, db, s.taskID, e.Path)
	if err != nil {
		return err
	}
	if ok {
		e.BaseETag = prev.BaseETag
		return agentsql.PutChangeEntry(ctx, db, s.taskID, *e)
	}
	info, err := s.base.Stat(ctx, s.projectID, e.Path)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		e.BaseETag = ""
	case err != nil:
		return err
	default:
		e.BaseETag = info.ETag
	}
	s.mu.Lock()
	seen, read := s.seen[e.Path]
	s.mu.Unlock()
	if read && seen != e.BaseETag {
		return s.conflict(ctx, e.Path)
	}
	return agentsql.PutChangeEntry(ctx, db, s.taskID, *e)
}

// conflict builds the ConflictError of a path from its current base state,
// and remembers that state as read: the agent now has the fresh content.
func (s *Set) conflict(ctx context.Context, p string) error {
	content, info, err := s.base.Read(ctx, s.projectID, p)
	ce := &storage.ConflictError{Path: p}
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return err
	default:
		ce.Exists, ce.Current, ce.ETag = true, content, info.ETag
	}
	s.mu.Lock()
	s.seen[p] = ce.ETag
	s.mu.Unlock()
	return ce
}

func (s *Set) clean(projectID, p string) (string, error) {
	if err := s.check(projectID); err != nil {
		return "", err
	}
	return storage.CleanPath(p)
}

// Apply writes the change set to the base store and marks it applying
// first, with the task's result, so that a crash half-way is finished by
// the next attempt ([Set.Resume]). Before anything is written every base
// version is checked: a file someone else changed meanwhile fails the whole
// set with a *storage.ConflictError and nothing is written. Each write is
// then conditional on that version ([storage.Store.WriteIf]), so a writer
// that slips in between the check and the write is not overwritten: the
// apply stops there with the conflict, the set stays applying, and the
// files written before it stay written. (Deletes are checked, then made:
// the stores have no conditional delete.)
func (s *Set) Apply(ctx context.Context, result []byte) ([]agentsql.ChangeEntry, error) {
	entries, err := s.Entries(ctx)
	if err != nil {
		return nil, err
	}
	pending, err := s.precheck(ctx, entries)
	if err != nil {
		return nil, err
	}
	if err := agentsql.MarkChangeSetApplying(ctx, s.pool, s.taskID, result); err != nil {
		return nil, err
	}
	if err := s.write(ctx, pending); err != nil {
		return nil, err
	}
	return entries, nil
}

// Resume finishes applying a change set whose apply was interrupted. It
// skips entries already applied and entries whose target already holds the
// staged state (written, but not yet marked, before the crash).
func (s *Set) Resume(ctx context.Context) ([]agentsql.ChangeEntry, error) {
	entries, err := s.Entries(ctx)
	if err != nil {
		return nil, err
	}
	var pending []agentsql.ChangeEntry
	for _, e := range entries {
		if !e.Applied {
			pending = append(pending, e)
		}
	}
	return entries, s.write(ctx, pending)
}

// precheck returns the entries still to write, or a conflict.
func (s *Set) precheck(ctx context.Context, entries []agentsql.ChangeEntry) ([]agentsql.ChangeEntry, error) {
	var pending []agentsql.ChangeEntry
	for _, e := range entries {
		if e.Applied {
			continue
		}
		info, err := s.base.Stat(ctx, s.projectID, e.Path)
		cur := info.ETag
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cur = ""
		case err != nil:
			return nil, fmt.Errorf("check %q before applying: %w", e.Path, err)
		}
		if cur != e.BaseETag {
			done, err := s.holds(ctx, e)
			if err != nil {
				return nil, err
			}
			if !done {
				return nil, s.conflict(ctx, e.Path)
			}
		}
		pending = append(pending, e)
	}
	return pending, nil
}

// holds reports whether the base store already holds the entry's state.
func (s *Set) holds(ctx context.Context, e agentsql.ChangeEntry) (bool, error) {
	content, _, err := s.base.Read(ctx, s.projectID, e.Path)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return e.Op == agentsql.ChangeDelete, nil
	case err != nil:
		return false, fmt.Errorf("check %q before applying: %w", e.Path, err)
	}
	return e.Op == agentsql.ChangeWrite && bytes.Equal(content, e.Content), nil
}

// write applies entries in order. A write is made only over the entry's
// base version; a target that already holds the staged content (written
// before a crash) counts as written.
func (s *Set) write(ctx context.Context, entries []agentsql.ChangeEntry) error {
	for _, e := range entries {
		switch e.Op {
		case agentsql.ChangeWrite:
			_, err := s.base.WriteIf(ctx, s.projectID, e.Path, e.Content, e.BaseETag)
			if errors.Is(err, storage.ErrConflict) {
				done, herr := s.holds(ctx, e)
				if herr != nil {
					return herr
				}
				if done {
					err = nil
				}
			}
			if err != nil {
				return fmt.Errorf("apply write of %q: %w", e.Path, err)
			}
		case agentsql.ChangeDelete:
			if err := s.base.Delete(ctx, s.projectID, e.Path); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return fmt.Errorf("apply delete of %q: %w", e.Path, err)
			}
		}
		if err := agentsql.MarkChangeEntryApplied(ctx, s.pool, s.taskID, e.Path); err != nil {
			return err
		}
	}
	return nil
}
