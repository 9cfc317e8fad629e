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
// and is idempotent: after a crash half-way it finishes the job; a conflict
// half-way puts back what it wrote.
//
// Every write a Set makes, to the database and to the store, is fenced by
// the holder of its task (sql.Fence): once another attempt holds the task,
// the Set writes nothing more and returns sql.ErrFenced.
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
	"github.com/agentworker/agentworker/tracing"
)

// Set is the change set of one build task, seen as the project's store.
type Set struct {
	pool      *pgxpool.Pool
	base      storage.Store
	taskID    uuid.UUID
	fence     agentsql.Fence
	projectID string

	mu   sync.Mutex
	seen map[string]string // path → base version the agent last read
	// staged mirrors this task's change_set_entries: the Set is their only
	// writer while its attempt runs, so neither reads (every Read, Stat and
	// List of the build) nor writes query them. A successful write updates
	// the mirror; a failed one drops it and the next read loads it again.
	staged  []agentsql.ChangeEntry // in ord order; nil: not loaded
	gen     uint64                 // counts changes of staged: a load that raced one is not kept
	created bool                   // this Open made the set
	// writing makes writes check and stage one at a time, so each sees the
	// mirror as the one before left it.
	writing sync.Mutex
}

// Open opens (or, for a retried attempt, reopens) the change set of the
// build task held by f and returns it with its status (sql.ChangeSetOpen, ...).
func Open(ctx context.Context, pool *pgxpool.Pool, base storage.Store, f agentsql.Fence, projectID uuid.UUID) (*Set, string, error) {
	status, created, err := agentsql.OpenChangeSet(ctx, pool, f, projectID)
	if err != nil {
		return nil, "", err
	}
	return Opened(pool, base, f, projectID, created), status, nil
}

// Opened returns the change set of the build task held by f, opened
// already (by its claim, sql.ClaimAndStart); created says that open made
// it.
func Opened(pool *pgxpool.Pool, base storage.Store, f agentsql.Fence, projectID uuid.UUID, created bool) *Set {
	s := &Set{pool: pool, base: base, taskID: f.TaskID, fence: f, projectID: projectID.String(), seen: map[string]string{}, created: created}
	if created {
		s.staged = []agentsql.ChangeEntry{}
	}
	return s
}

// Fresh reports whether Open created the set: a new set has no entries,
// decisions or checkpointed state, so there is nothing to reset or rewind.
func (s *Set) Fresh() bool { return s.created }

// Reset empties the change set, for a build that starts over.
func (s *Set) Reset(ctx context.Context) error {
	s.mu.Lock()
	s.seen = map[string]string{}
	s.mu.Unlock()
	s.changed()
	if err := agentsql.ResetChangeSet(ctx, s.pool, s.fence); err != nil {
		return err
	}
	s.mu.Lock()
	s.staged, s.gen = []agentsql.ChangeEntry{}, s.gen+1
	s.mu.Unlock()
	return nil
}

// Rewind puts the change set back to what the task's last checkpoint
// recorded, for an attempt that continues from that checkpoint.
func (s *Set) Rewind(ctx context.Context) error {
	s.mu.Lock()
	s.seen = map[string]string{}
	s.mu.Unlock()
	s.changed()
	return agentsql.RewindChangeSet(ctx, s.pool, s.fence)
}

// Entries returns the pending changes in the order they were first made,
// without the void ones (files the build created and removed again).
func (s *Set) Entries(ctx context.Context) ([]agentsql.ChangeEntry, error) {
	staged, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var out []agentsql.ChangeEntry
	for _, e := range staged {
		if !e.Void() {
			out = append(out, e)
		}
	}
	return out, nil
}

// snapshot returns the mirror, loading it if needed. A published mirror is
// never changed in place (put and drop build a new one), so the caller may
// read it without the lock but must not modify it.
func (s *Set) snapshot(ctx context.Context) ([]agentsql.ChangeEntry, error) {
	s.mu.Lock()
	staged, gen := s.staged, s.gen
	s.mu.Unlock()
	if staged == nil {
		loaded, err := agentsql.ListChangeEntries(ctx, s.pool, s.taskID)
		if err != nil {
			return nil, err
		}
		staged = append([]agentsql.ChangeEntry{}, loaded...) // non-nil: loaded
		s.mu.Lock()
		if s.gen == gen {
			s.staged = staged
		}
		s.mu.Unlock()
	}
	return staged, nil
}

// changed drops the mirror of the entries: after a failed write, or one
// that changed more than the mirror knows; the next read loads it.
func (s *Set) changed() {
	s.mu.Lock()
	s.staged, s.gen = nil, s.gen+1
	s.mu.Unlock()
}

// put mirrors a staged entry after its statement succeeded: an existing
// entry keeps its base version, order and prior; a new one comes last.
func (s *Set) put(e agentsql.ChangeEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staged == nil {
		return
	}
	staged := append([]agentsql.ChangeEntry(nil), s.staged...)
	s.staged, s.gen = staged, s.gen+1
	for i := range staged {
		if staged[i].Path == e.Path {
			staged[i].Op, staged[i].Content, staged[i].FromPath, staged[i].Applied = e.Op, e.Content, e.FromPath, false
			return
		}
	}
	e.Ord = 1
	if n := len(staged); n > 0 {
		e.Ord = staged[n-1].Ord + 1
	}
	e.Applied, e.Prior = false, agentsql.Prior{Path: e.Path}
	s.staged = append(staged, e)
}

// Discard drops the pending changes; the project stays as it was.
func (s *Set) Discard(ctx context.Context) error {
	return agentsql.FinishChangeSet(ctx, s.pool, s.fence, agentsql.ChangeSetDiscarded, false)
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
	// Served from the mirror, a call still honours its context, as every
	// store does.
	if err := ctx.Err(); err != nil {
		return agentsql.ChangeEntry{}, false, fmt.Errorf("%q: %w", p, err)
	}
	entries, err := s.snapshot(ctx)
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
	return s.overlay(ctx, files, dir)
}

// ListRecent implements storage.RecentLister: the base store's recent
// listing (storage.ListRecent) with the pending changes applied, which are
// always current.
func (s *Set) ListRecent(ctx context.Context, projectID, dir string) ([]storage.FileInfo, time.Duration, error) {
	if err := s.check(projectID); err != nil {
		return nil, 0, err
	}
	files, age, err := storage.ListRecent(ctx, s.base, projectID, dir)
	if err != nil {
		return nil, 0, err
	}
	files, err = s.overlay(ctx, files, dir)
	return files, age, err
}

// overlay applies the pending changes under dir to files, a base listing
// of dir.
func (s *Set) overlay(ctx context.Context, files []storage.FileInfo, dir string) ([]storage.FileInfo, error) {
	entries, err := s.snapshot(ctx)
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
	info, _, err := s.Upsert(ctx, projectID, p, content)
	return info, err
}

// Upsert implements storage.Upserter: Write, telling from the lookup that
// sets a first change's base version whether the file is new to the build.
func (s *Set) Upsert(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, bool, error) {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return storage.FileInfo{}, false, err
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	return s.stageWrite(ctx, clean, content)
}

// stageWrite stages content at a clean path and reports whether the file
// was absent from the build's view; the caller holds s.writing.
func (s *Set) stageWrite(ctx context.Context, clean string, content []byte) (storage.FileInfo, bool, error) {
	e := agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeWrite, Content: content}
	created, err := s.stage(ctx, s.pool, &e)
	if err != nil {
		s.changed()
		return storage.FileInfo{}, false, fmt.Errorf("write %q: %w", clean, err)
	}
	return stagedInfo(e), created, nil
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
	info, _, err := s.stageWrite(ctx, clean, content)
	return info, err
}

// Delete implements storage.Store: it stages the deletion.
func (s *Set) Delete(ctx context.Context, projectID, p string) error {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return err
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	if err := s.del(ctx, s.pool, clean); err != nil {
		s.changed()
		return err
	}
	return nil
}

// DeleteIf implements storage.Store: it stages the deletion only if the
// file, as this build sees it, is still at version ifMatch.
func (s *Set) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	clean, err := s.clean(projectID, p)
	if err != nil {
		return err
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	content, info, err := s.Read(ctx, projectID, clean)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("delete %q: %w", clean, &storage.ConflictError{Path: clean})
	case err != nil:
		return fmt.Errorf("delete %q: %w", clean, err)
	case info.ETag != ifMatch:
		return fmt.Errorf("delete %q: %w", clean, &storage.ConflictError{Path: clean, Exists: true, Current: content, ETag: info.ETag})
	}
	if err := s.del(ctx, s.pool, clean); err != nil {
		s.changed()
		return err
	}
	return nil
}

// del stages the deletion of a clean path; the caller holds s.writing and
// drops the mirror if it fails.
func (s *Set) del(ctx context.Context, db agentsql.DBTX, clean string) error {
	prev, ok, err := s.entry(ctx, clean)
	if err != nil {
		return err
	}
	if ok {
		switch {
		case prev.Op == agentsql.ChangeDelete:
			return fmt.Errorf("delete %q: %w", clean, storage.ErrNotFound)
		case prev.BaseETag == "":
			// Created in this build: deleting it cancels the change. The
			// entry stays, void (a delete of a file the base did not hold),
			// so that a rewind to a checkpoint that saw the file has the
			// row to put it back from.
			if err := s.putEntry(ctx, db, agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeDelete}); err != nil {
				return fmt.Errorf("delete %q: %w", clean, err)
			}
			return nil
		}
		e := agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeDelete, BaseETag: prev.BaseETag}
		if err := s.putEntry(ctx, db, e); err != nil {
			return fmt.Errorf("delete %q: %w", clean, err)
		}
		return nil
	}
	info, err := s.base.Stat(ctx, s.projectID, clean)
	if err != nil {
		// Untouched by this build and missing from the base (ErrNotFound):
		// there is nothing to delete, and no delete to stage.
		return fmt.Errorf("delete %q: %w", clean, err)
	}
	if err := s.stageFirst(ctx, db, agentsql.ChangeEntry{Path: clean, Op: agentsql.ChangeDelete, BaseETag: info.ETag}); err != nil {
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
	s.writing.Lock()
	defer s.writing.Unlock()
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
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		e := agentsql.ChangeEntry{Path: cto, Op: agentsql.ChangeWrite, Content: content, FromPath: cfrom}
		if _, err := s.stage(ctx, tx, &e); err != nil {
			return fmt.Errorf("move to %q: %w", cto, err)
		}
		return s.del(ctx, tx, cfrom)
	})
	if err != nil {
		s.changed() // the transaction rolled back what the mirror took in
	}
	return err
}

// stage records e, setting its base version for a path the build has not
// touched yet, and refusing the change when the file changed since the
// agent read it. created reports that the path had no file in the build's
// view before.
func (s *Set) stage(ctx context.Context, db agentsql.DBTX, e *agentsql.ChangeEntry) (created bool, err error) {
	prev, ok, err := s.entry(ctx, e.Path)
	if err != nil {
		return false, err
	}
	if ok {
		e.BaseETag = prev.BaseETag
		return prev.Op == agentsql.ChangeDelete, s.putEntry(ctx, db, *e)
	}
	info, err := s.base.Stat(ctx, s.projectID, e.Path)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		e.BaseETag, created = "", true
	case err != nil:
		return false, err
	default:
		e.BaseETag = info.ETag
	}
	return created, s.stageFirst(ctx, db, *e)
}

// stageFirst stages the first change of a path, made against its base
// version e.BaseETag, refusing it when that is not the version the agent
// last read.
func (s *Set) stageFirst(ctx context.Context, db agentsql.DBTX, e agentsql.ChangeEntry) error {
	s.mu.Lock()
	seen, read := s.seen[e.Path]
	s.mu.Unlock()
	if read && seen != e.BaseETag {
		return s.conflict(ctx, e.Path)
	}
	return s.putEntry(ctx, db, e)
}

// putEntry writes e to change_set_entries and, once written, to the mirror.
func (s *Set) putEntry(ctx context.Context, db agentsql.DBTX, e agentsql.ChangeEntry) error {
	if err := agentsql.PutChangeEntry(ctx, db, s.fence, e); err != nil {
		return err
	}
	s.put(e)
	return nil
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
// first, with the task's result and what each path held before, so that a
// crash half-way is finished by the next attempt ([Set.Resume]). Before
// anything is written every base version is checked: a file someone else
// changed meanwhile fails the whole set with a *storage.ConflictError and
// nothing is written. Each write and delete is then conditional on that
// version ([storage.Store.WriteIf], [storage.Store.DeleteIf]), so a writer
// that slips in between the check and the write is not overwritten: the
// apply stops there with the conflict, puts back what it wrote and
// discards the set.
//
// Each write to the store follows a fenced statement of this holder (the
// mark of the set, then the mark of the entry before): a holder that lost
// the task stops before its next write. A write already under way when
// the task changed hands is conditional on the version its set was made
// against, which the new holder's write of the same path replaces.
func (s *Set) Apply(ctx context.Context, result []byte) (_ []agentsql.ChangeEntry, err error) {
	ctx, span := tracing.Start(ctx, "apply")
	defer func() { span.End(err) }()
	entries, err := s.Entries(ctx)
	if err != nil {
		return nil, err
	}
	pending, priors, err := s.precheck(ctx, entries)
	if err != nil {
		return nil, err
	}
	if err := agentsql.MarkChangeSetApplying(ctx, s.pool, s.fence, result, priors); err != nil {
		return nil, err
	}
	s.changed() // the entries now hold their priors
	if err := s.write(ctx, pending); err != nil {
		return nil, s.undo(ctx, err)
	}
	span.SetInt("agentworker.files", len(entries))
	return entries, nil
}

// Resume finishes applying a change set whose apply was interrupted. It
// skips entries already applied and entries whose target already holds the
// staged state (written, but not yet marked, before the crash). A conflict
// puts back what the apply wrote, as Apply does.
func (s *Set) Resume(ctx context.Context) (_ []agentsql.ChangeEntry, err error) {
	ctx, span := tracing.Start(ctx, "apply")
	span.SetString("agentworker.apply", "resumed")
	defer func() { span.End(err) }()
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
	if _, err := agentsql.CheckFence(ctx, s.pool, s.fence); err != nil {
		return nil, err
	}
	if err := s.write(ctx, pending); err != nil {
		return nil, s.undo(ctx, err)
	}
	return entries, nil
}

// precheck returns the entries still to write and what their paths hold
// now, or a conflict.
func (s *Set) precheck(ctx context.Context, entries []agentsql.ChangeEntry) ([]agentsql.ChangeEntry, []agentsql.Prior, error) {
	var pending []agentsql.ChangeEntry
	var priors []agentsql.Prior
	for _, e := range entries {
		if e.Applied {
			continue
		}
		prior, conflict, err := check(ctx, s.base, s.projectID, e)
		if err != nil {
			return nil, nil, err
		}
		if conflict {
			return nil, nil, s.conflict(ctx, e.Path)
		}
		pending = append(pending, e)
		priors = append(priors, prior)
	}
	return pending, priors, nil
}

// Dropped is a staged change that DropConflicts removed, with what its
// file holds in storage now.
type Dropped struct {
	Staged  agentsql.ChangeEntry
	Exists  bool
	Current []byte
}

// DropConflicts removes the staged changes whose files changed in storage
// since the build read them, with the other half of a move, so that a
// revision sees those files as they are now and what it writes is based
// on their current version (kept, such a change would conflict at every
// approve). It returns what it removed, in staged order.
func (s *Set) DropConflicts(ctx context.Context) ([]Dropped, error) {
	staged, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	drop := map[string]bool{}
	for _, e := range staged {
		_, conflict, err := check(ctx, s.base, s.projectID, e)
		if err != nil {
			return nil, err
		}
		if conflict && !e.Applied {
			drop[e.Path] = true
		}
	}
	if len(drop) == 0 {
		return nil, nil
	}
	for _, e := range staged { // a move is its target and its source, or neither
		if e.FromPath != "" && (drop[e.Path] || drop[e.FromPath]) {
			drop[e.Path], drop[e.FromPath] = true, true
		}
	}
	var out []Dropped
	var paths []string
	for _, e := range staged {
		if !drop[e.Path] {
			continue
		}
		content, _, err := s.base.Read(ctx, s.projectID, e.Path)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, fmt.Errorf("read %q to drop its staged change: %w", e.Path, err)
		}
		out = append(out, Dropped{Staged: e, Exists: err == nil, Current: content})
		paths = append(paths, e.Path)
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	s.changed()
	if err := agentsql.DropChangeEntries(ctx, s.pool, s.fence, paths); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, p := range paths {
		delete(s.seen, p)
	}
	s.mu.Unlock()
	return out, nil
}

// Conflicts returns the paths of the entries not yet applied that an apply
// would refuse: their files changed in base since the build read them. It
// is the rule Apply checks, for a caller that must answer before a worker
// applies (an approve).
func Conflicts(ctx context.Context, base storage.Store, projectID string, entries []agentsql.ChangeEntry) ([]string, error) {
	var paths []string
	for _, e := range entries {
		if e.Applied {
			continue
		}
		_, conflict, err := check(ctx, base, projectID, e)
		if err != nil {
			return nil, err
		}
		if conflict {
			paths = append(paths, e.Path)
		}
	}
	return paths, nil
}

// check reads what e's path holds in base now, and whether applying e
// conflicts: the file is not the version e was made against and does not
// already hold e's state (written before a crash). A void entry (a file
// the build created, then deleted or moved away) conflicts only with a
// file someone else created meanwhile.
func check(ctx context.Context, base storage.Store, projectID string, e agentsql.ChangeEntry) (agentsql.Prior, bool, error) {
	content, info, err := base.Read(ctx, projectID, e.Path)
	prior := agentsql.Prior{Path: e.Path, Known: true, Exists: err == nil, Content: content}
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return prior, e.BaseETag != "" && e.Op != agentsql.ChangeDelete, nil
	case err != nil:
		return prior, false, fmt.Errorf("check %q before applying: %w", e.Path, err)
	}
	done := e.Op == agentsql.ChangeWrite && bytes.Equal(content, e.Content)
	return prior, info.ETag != e.BaseETag && !done, nil
}

// holds reports whether the base store already holds the entry's state.
func (s *Set) holds(ctx context.Context, e agentsql.ChangeEntry) (bool, error) {
	done, _, err := s.holdsAt(ctx, e)
	return done, err
}

// holdsAt is holds, with the version of the file it found ("" when there
// is none): the version a rollback of the entry is conditional on.
func (s *Set) holdsAt(ctx context.Context, e agentsql.ChangeEntry) (bool, string, error) {
	content, info, err := s.base.Read(ctx, s.projectID, e.Path)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return e.Op == agentsql.ChangeDelete, "", nil
	case err != nil:
		return false, "", fmt.Errorf("check %q: %w", e.Path, err)
	}
	return e.Op == agentsql.ChangeWrite && bytes.Equal(content, e.Content), info.ETag, nil
}

// write applies entries in order. A write is made only over the entry's
// base version; a target that already holds the staged content (written
// before a crash) counts as written. The caller has just made a fenced
// statement; each entry's mark is the fenced go-ahead for the next write.
// The last entry is not marked: no write follows it, and the caller's
// FinishChangeSet ends the set (after a crash before that, [Set.Resume]
// finds the entry's state already in the store).
func (s *Set) write(ctx context.Context, entries []agentsql.ChangeEntry) error {
	for i, e := range entries {
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
			// Only the version the build deleted: a file someone wrote
			// since is theirs. One already gone was deleted before a crash.
			err := s.base.DeleteIf(ctx, s.projectID, e.Path, e.BaseETag)
			var ce *storage.ConflictError
			if errors.As(err, &ce) && !ce.Exists {
				err = nil
			}
			if err != nil {
				return fmt.Errorf("apply delete of %q: %w", e.Path, err)
			}
		}
		if i == len(entries)-1 {
			break
		}
		if err := agentsql.MarkChangeEntryApplied(ctx, s.pool, s.fence, e.Path); err != nil {
			return err
		}
	}
	return nil
}

// undo puts back what an apply stopped by a conflict wrote: every path of
// the set that holds the staged state gets what it held before, newest
// first, and the set is discarded, so a retry starts against the current
// files. A path someone else changed meanwhile is theirs and left alone:
// each write of the rollback is conditional on the version it found
// holding the staged state, so a write landing after that check is not
// overwritten either.
// Only a conflict is undone: a stale holder (sql.ErrFenced) stops at once,
// and a storage failure leaves the set applying for the next attempt.
func (s *Set) undo(ctx context.Context, cause error) error {
	if !errors.Is(cause, storage.ErrConflict) {
		return cause
	}
	s.changed()
	entries, err := s.Entries(ctx)
	if err != nil {
		return errors.Join(cause, err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		done, version, err := s.holdsAt(ctx, e)
		if err != nil {
			return errors.Join(cause, fmt.Errorf("roll back %q: %w", e.Path, err))
		}
		if !done || !e.Prior.Known || (e.Op == agentsql.ChangeDelete && !e.Prior.Exists) {
			continue
		}
		if _, err := agentsql.CheckFence(ctx, s.pool, s.fence); err != nil {
			return err
		}
		if e.Prior.Exists {
			// version is "" after an applied delete: create only.
			_, err = s.base.WriteIf(ctx, s.projectID, e.Path, e.Prior.Content, version)
		} else {
			err = s.base.DeleteIf(ctx, s.projectID, e.Path, version)
		}
		if errors.Is(err, storage.ErrConflict) {
			continue // written by someone else since the check: theirs
		}
		if err != nil {
			return errors.Join(cause, fmt.Errorf("roll back %q: %w", e.Path, err))
		}
	}
	if err := agentsql.FinishChangeSet(ctx, s.pool, s.fence, agentsql.ChangeSetDiscarded, true); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}
