package changeset_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) { dbtest.Main(m, s3test.LeakOption()) }

type fixture struct {
	pool    *pgxpool.Pool
	store   *storage.S3
	set     *changeset.Set
	taskID  uuid.UUID
	fence   agentsql.Fence
	project string
}

func setup(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	f := &fixture{pool: dbtest.New(t), store: s3test.NewStore(t)}
	projectID := uuid.New()
	f.project = projectID.String()
	// The set's writes are fenced by the holder of a running task.
	f.fence = dbtest.HeldBuild(t, f.pool, projectID, "x")
	f.taskID = f.fence.TaskID
	for p, c := range files {
		if _, err := f.store.Write(t.Context(), f.project, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	f.set, _, err = changeset.Open(t.Context(), f.pool, f.store, f.fence, projectID)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConformance holds the change set to the storage.Store contract, over
// a local and an S3 base: a build's tools must not tell it from the store.
func TestConformance(t *testing.T) {
	t.Parallel()
	bases := []struct {
		name    string
		newBase func(t *testing.T) storage.Store
	}{
		{name: "LocalBase", newBase: func(t *testing.T) storage.Store {
			t.Helper()
			s, err := storage.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{name: "S3Base", newBase: func(t *testing.T) storage.Store {
			t.Helper()
			return s3test.NewStore(t)
		}},
	}
	for _, b := range bases {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			projectID := uuid.New()
			storagetest.Run(t, func(t *testing.T) storage.Store {
				t.Helper()
				fence := dbtest.HeldBuild(t, pool, projectID, "x")
				set, _, err := changeset.Open(t.Context(), pool, b.newBase(t), fence, projectID)
				if err != nil {
					t.Fatalf("open change set: %v", err)
				}
				return set
			}, storagetest.SingleProject(projectID.String()))
		})
	}
}

func (f *fixture) read(t *testing.T, s storage.Store, p string) string {
	t.Helper()
	c, _, err := s.Read(t.Context(), f.project, p)
	if errors.Is(err, storage.ErrNotFound) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

func TestReadsSeePendingWritesAndApplyLandsThem(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	ctx := t.Context()
	if _, err := f.set.Write(ctx, f.project, "a.txt", []byte("A\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.set.Delete(ctx, f.project, "b.txt"); err != nil {
		t.Fatal(err)
	}
	if err := f.set.Move(ctx, f.project, "c.txt", "d/c.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.set.Write(ctx, f.project, "tmp.txt", []byte("t")); err != nil {
		t.Fatal(err)
	}
	if err := f.set.Delete(ctx, f.project, "tmp.txt"); err != nil {
		t.Fatal(err)
	}
	// The build sees its changes; the project does not, yet.
	for p, want := range map[string]string{"a.txt": "A\n", "b.txt": "<missing>", "c.txt": "<missing>", "d/c.txt": "c\n", "tmp.txt": "<missing>"} {
		if got := f.read(t, f.set, p); got != want {
			t.Errorf("set: %s = %q, want %q", p, got, want)
		}
	}
	list, err := f.set.List(ctx, f.project, "")
	if err != nil || len(list) != 2 || list[0].Path != "a.txt" || list[1].Path != "d/c.txt" {
		t.Fatalf("set list = %v, %v", list, err)
	}
	if got := f.read(t, f.store, "a.txt"); got != "a\n" {
		t.Fatalf("the project changed before apply: a.txt = %q", got)
	}
	if _, err := f.set.Apply(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a.txt": "A\n", "b.txt": "<missing>", "c.txt": "<missing>", "d/c.txt": "c\n", "tmp.txt": "<missing>"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("store: %s = %q, want %q", p, got, want)
		}
	}
}

func TestWriteOverAFileChangedMeanwhileIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n"})
	ctx := t.Context()
	if _, _, err := f.set.Read(ctx, f.project, "a.txt"); err != nil {
		t.Fatal(err)
	}
	// Someone else writes the file after the agent read it.
	if _, err := f.store.Write(ctx, f.project, "a.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	_, err := f.set.Write(ctx, f.project, "a.txt", []byte("mine\n"))
	var ce *storage.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, storage.ErrConflict) || string(ce.Current) != "theirs\n" {
		t.Fatalf("write err = %v, want a conflict with the fresh content", err)
	}
	// Having been shown the fresh content, the agent may write again.
	if _, err := f.set.Write(ctx, f.project, "a.txt", []byte("mine\n")); err != nil {
		t.Fatalf("second write: %v", err)
	}
}

func TestApplyRefusesAConflictAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	ctx := t.Context()
	for _, p := range []string{"a.txt", "b.txt"} {
		if _, err := f.set.Write(ctx, f.project, p, []byte("new "+p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.Write(ctx, f.project, "b.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.set.Apply(ctx, []byte(`{}`)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("apply err = %v, want a conflict", err)
	}
	if got := f.read(t, f.store, "a.txt"); got != "a\n" {
		t.Fatalf("a.txt = %q: a conflicting set was partly applied", got)
	}
}

func TestResumeAfterACrashIsIdempotent(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 4 {
		files[fmt.Sprintf("f%d.txt", i)] = "old\n"
	}
	f := setup(t, files)
	ctx := t.Context()
	for i := range 4 {
		if _, err := f.set.Write(ctx, f.project, fmt.Sprintf("f%d.txt", i), []byte("new\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.set.Delete(ctx, f.project, "f3.txt"); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash half-way: marked applying, f0 marked applied, f1
	// written but not marked, f2 and f3 untouched.
	if err := agentsql.MarkChangeSetApplying(ctx, f.pool, f.fence, []byte(`{"summary":"s"}`), f.priors(t, "f0.txt", "f1.txt", "f2.txt", "f3.txt")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"f0.txt", "f1.txt"} {
		if _, err := f.store.Write(ctx, f.project, p, []byte("new\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := agentsql.MarkChangeEntryApplied(ctx, f.pool, f.fence, "f0.txt"); err != nil {
		t.Fatal(err)
	}
	// A new attempt reopens the set, sees it applying, and resumes — twice.
	set, status, err := changeset.Open(ctx, f.pool, f.store, f.fence, uuid.MustParse(f.project))
	if err != nil || status != agentsql.ChangeSetApplying {
		t.Fatalf("reopen: status %q, %v", status, err)
	}
	for range 2 {
		if _, err := set.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{"f0.txt": "new\n", "f1.txt": "new\n", "f2.txt": "new\n", "f3.txt": "<missing>"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// A discard cannot undo a set being applied.
	if err := set.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetApplying {
		t.Errorf("status after discard = %s, want applying", st)
	}
}

func TestApplyDoesNotOverwriteAWriterBetweenCheckAndWrite(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	ctx := t.Context()
	for _, p := range []string{"a.txt", "b.txt"} {
		if _, err := f.set.Write(ctx, f.project, p, []byte("new "+p)); err != nil {
			t.Fatal(err)
		}
	}
	// The set passed its check and is applying when someone else writes
	// b.txt: the conditional write must refuse to overwrite it, and what
	// the apply wrote before is put back.
	if err := agentsql.MarkChangeSetApplying(ctx, f.pool, f.fence, []byte(`{}`), f.priors(t, "a.txt", "b.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Write(ctx, f.project, "b.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	_, err := f.set.Resume(ctx)
	var ce *storage.ConflictError
	if !errors.As(err, &ce) || ce.Path != "b.txt" || string(ce.Current) != "theirs\n" {
		t.Fatalf("resume err = %v, want a conflict on b.txt with its fresh content", err)
	}
	for p, want := range map[string]string{"a.txt": "a\n", "b.txt": "theirs\n"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetDiscarded {
		t.Errorf("status after the rolled back apply = %s, want discarded", st)
	}
}

// priors reads what paths hold now, as Apply records them.
func (f *fixture) priors(t *testing.T, paths ...string) []agentsql.Prior {
	t.Helper()
	var out []agentsql.Prior
	for _, p := range paths {
		c, _, err := f.store.Read(t.Context(), f.project, p)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatal(err)
		}
		out = append(out, agentsql.Prior{Path: p, Known: true, Exists: err == nil, Content: c})
	}
	return out
}

func TestWriteIfAgainstTheBuildsView(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n"})
	ctx := t.Context()
	_, base, err := f.set.Read(ctx, f.project, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	staged, err := f.set.WriteIf(ctx, f.project, "a.txt", []byte("one\n"), base.ETag)
	if err != nil {
		t.Fatalf("WriteIf over the base version: %v", err)
	}
	// The base version is no longer what the build sees.
	_, err = f.set.WriteIf(ctx, f.project, "a.txt", []byte("two\n"), base.ETag)
	var ce *storage.ConflictError
	if !errors.As(err, &ce) || string(ce.Current) != "one\n" || ce.ETag != staged.ETag {
		t.Fatalf("WriteIf over a stale version = %v, want a conflict showing the staged content", err)
	}
	if _, err := f.set.WriteIf(ctx, f.project, "a.txt", []byte("two\n"), staged.ETag); err != nil {
		t.Fatalf("WriteIf over the staged version: %v", err)
	}
	if _, err := f.set.WriteIf(ctx, f.project, "new.txt", []byte("n"), ""); err != nil {
		t.Fatalf("create-only WriteIf: %v", err)
	}
	if _, err := f.set.WriteIf(ctx, f.project, "new.txt", []byte("n2"), ""); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("second create-only WriteIf = %v, want ErrConflict", err)
	}
	if got := f.read(t, f.set, "a.txt"); got != "two\n" {
		t.Errorf("a.txt in the build = %q", got)
	}
}

// TestStaleHolderWritesNothing: once the task was claimed again (the
// fence moved on), every write of the old holder's set is refused in the
// database and nothing reaches the store; the new holder's set is intact.
func TestStaleHolderWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"a.txt": "a\n"})
	ctx := t.Context()
	if _, err := f.set.Write(ctx, f.project, "a.txt", []byte("mine\n")); err != nil {
		t.Fatal(err)
	}
	// Another attempt claims the task: running again under a new fence.
	var epoch int64
	if err := f.pool.QueryRow(ctx, `UPDATE ai_tasks SET fence = fence + 1`+dbtest.AsWorker+`WHERE id = $1 RETURNING fence`, f.taskID).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"Write":  func() error { _, err := f.set.Write(ctx, f.project, "b.txt", []byte("b")); return err },
		"Delete": func() error { return f.set.Delete(ctx, f.project, "a.txt") },
		"Move":   func() error { return f.set.Move(ctx, f.project, "a.txt", "c.txt", false) },
		"Reset":  func() error { return f.set.Reset(ctx) },
		"Discard": func() error {
			return f.set.Discard(ctx)
		},
		"Apply": func() error { _, err := f.set.Apply(ctx, []byte(`{}`)); return err },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, agentsql.ErrFenced) {
			t.Errorf("%s by the stale holder = %v, want ErrFenced", name, err)
		}
	}
	if got := f.read(t, f.store, "a.txt"); got != "a\n" {
		t.Errorf("a.txt = %q: the stale holder wrote to the project", got)
	}
	entries, err := agentsql.ListChangeEntries(ctx, f.pool, f.taskID)
	if err != nil || len(entries) != 1 || string(entries[0].Content) != "mine\n" {
		t.Errorf("entries = %+v, %v: want the one staged before the takeover, untouched", entries, err)
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetOpen {
		t.Errorf("set status = %s, want open", st)
	}
	// The new holder goes on with the same set.
	set, status, err := changeset.Open(ctx, f.pool, f.store, agentsql.Fence{TaskID: f.taskID, Epoch: epoch}, uuid.MustParse(f.project))
	if err != nil || status != agentsql.ChangeSetOpen {
		t.Fatalf("open by the new holder: %q, %v", status, err)
	}
	if _, err := set.Apply(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, f.store, "a.txt"); got != "mine\n" {
		t.Errorf("a.txt after the new holder applied = %q", got)
	}
}

// TestConflictHalfWayRollsBack: a crash left a set applying with some
// entries written; someone then edits a file still pending. Finishing the
// apply meets the conflict, puts back what each written path held (a
// created file goes, an updated one gets its old content, a deleted one
// comes back), leaves the other writer's file alone and discards the set.
func TestConflictHalfWayRollsBack(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"upd.txt": "old\n", "del.txt": "gone?\n", "last.txt": "last\n"})
	ctx := t.Context()
	if _, err := f.set.Write(ctx, f.project, "new.txt", []byte("created\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.set.Write(ctx, f.project, "upd.txt", []byte("updated\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.set.Delete(ctx, f.project, "del.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.set.Write(ctx, f.project, "last.txt", []byte("mine\n")); err != nil {
		t.Fatal(err)
	}
	if err := agentsql.MarkChangeSetApplying(ctx, f.pool, f.fence, []byte(`{}`), f.priors(t, "new.txt", "upd.txt", "del.txt", "last.txt")); err != nil {
		t.Fatal(err)
	}
	// The crashed attempt wrote three of the four entries.
	if _, err := f.store.Write(ctx, f.project, "new.txt", []byte("created\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Write(ctx, f.project, "upd.txt", []byte("updated\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Delete(ctx, f.project, "del.txt"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"new.txt", "upd.txt"} {
		if err := agentsql.MarkChangeEntryApplied(ctx, f.pool, f.fence, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.Write(ctx, f.project, "last.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	_, err := f.set.Resume(ctx)
	var ce *storage.ConflictError
	if !errors.As(err, &ce) || ce.Path != "last.txt" {
		t.Fatalf("resume = %v, want a conflict naming last.txt", err)
	}
	for p, want := range map[string]string{"new.txt": "<missing>", "upd.txt": "old\n", "del.txt": "gone?\n", "last.txt": "theirs\n"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetDiscarded {
		t.Errorf("set status = %s, want discarded: a retry starts against the current files", st)
	}
}

// TestRewindToTheCheckpoint: changes made after the last checkpoint (by
// the tools of an iteration a crash cut short) are undone when a new
// attempt resumes from it; changes it recorded stay, whatever came after
// them: a rewrite, a delete or a move of a file the build created, or of
// a file of the project.
func TestRewindToTheCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// after is the cut-short iteration's change.
		after func(ctx context.Context, f *fixture) error
	}{
		{"Write", func(ctx context.Context, f *fixture) error {
			_, err := f.set.Write(ctx, f.project, "new.txt", []byte("two\n"))
			return err
		}},
		{"Delete", func(ctx context.Context, f *fixture) error { return f.set.Delete(ctx, f.project, "new.txt") }},
		{"Move", func(ctx context.Context, f *fixture) error {
			return f.set.Move(ctx, f.project, "new.txt", "moved.txt", false)
		}},
		{"DeleteProjectFile", func(ctx context.Context, f *fixture) error { return f.set.Delete(ctx, f.project, "a.txt") }},
		{"MoveProjectFile", func(ctx context.Context, f *fixture) error {
			return f.set.Move(ctx, f.project, "a.txt", "moved.txt", false)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
			ctx := t.Context()
			if _, err := f.set.Write(ctx, f.project, "a.txt", []byte("one\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := f.set.Write(ctx, f.project, "new.txt", []byte("created\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := agentsql.SaveCheckpoint(ctx, f.pool, f.fence, agentsql.Checkpoint{TaskID: f.taskID, Attempt: 1, Iteration: 1,
				Messages: []byte(`[]`), State: []byte(`{}`)}, agentsql.Spend{}); err != nil {
				t.Fatal(err)
			}
			// The next iteration's tools, cut short by a crash.
			if err := tt.after(ctx, f); err != nil {
				t.Fatal(err)
			}
			if _, err := f.set.Write(ctx, f.project, "ghost.txt", []byte("ghost\n")); err != nil {
				t.Fatal(err)
			}
			if err := f.set.Delete(ctx, f.project, "b.txt"); err != nil {
				t.Fatal(err)
			}
			if err := f.set.Rewind(ctx); err != nil {
				t.Fatal(err)
			}
			// Read through a Set that loads the entries from the table, as
			// the resumed attempt does.
			set := changeset.Opened(f.pool, f.store, f.fence, uuid.MustParse(f.project), false)
			want := map[string]string{"a.txt": "one\n", "new.txt": "created\n", "b.txt": "b\n", "ghost.txt": "<missing>", "moved.txt": "<missing>"}
			for p, w := range want {
				if got := f.read(t, set, p); got != w {
					t.Errorf("%s in the build after the rewind = %q, want %q", p, got, w)
				}
			}
			entries, err := set.Entries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := describePaths(entries), "a.txt write, new.txt write"; got != want {
				t.Errorf("entries after the rewind = %s, want %s", got, want)
			}
			// The resumed build applies what the checkpoint saw.
			if _, err := set.Apply(ctx, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			for p, w := range want {
				if got := f.read(t, f.store, p); got != w {
					t.Errorf("%s in the project after the apply = %q, want %q", p, got, w)
				}
			}
		})
	}
}

func describePaths(entries []agentsql.ChangeEntry) string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Path + " " + e.Op
	}
	return strings.Join(out, ", ")
}

// afterWrite is the real store with a fault injected after each
// conditional write: the moment a holder can lose its task mid-apply.
type afterWrite struct {
	*storage.S3
	hook func()
}

func (a afterWrite) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	info, err := a.S3.WriteIf(ctx, projectID, p, content, ifMatch)
	a.hook()
	return info, err
}

// TestTakeoverMidApplyStopsTheStaleHolder: the task changes hands after
// the first file of an apply landed; the old holder writes no other file,
// marks nothing, and neither rolls back nor discards: the new holder
// resumes the set and lands the rest, each file once.
func TestTakeoverMidApplyStopsTheStaleHolder(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := t.Context()
	var once sync.Once
	var newFence agentsql.Fence
	store := afterWrite{S3: f.store, hook: func() {
		once.Do(func() {
			newFence = agentsql.Fence{TaskID: f.taskID}
			if err := f.pool.QueryRow(ctx, `UPDATE ai_tasks SET fence = fence + 1`+dbtest.AsWorker+`WHERE id = $1 RETURNING fence`, f.taskID).Scan(&newFence.Epoch); err != nil {
				t.Error(err)
			}
		})
	}}
	set, _, err := changeset.Open(ctx, f.pool, store, f.fence, uuid.MustParse(f.project))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", "b.txt", "c.txt"} {
		if _, err := set.Write(ctx, f.project, p, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := set.Apply(ctx, []byte(`{}`)); !errors.Is(err, agentsql.ErrFenced) {
		t.Fatalf("apply by the holder that lost the task = %v, want ErrFenced", err)
	}
	for p, want := range map[string]string{"a.txt": "a.txt", "b.txt": "<missing>", "c.txt": "<missing>"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s after the stale holder stopped = %q, want %q", p, got, want)
		}
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetApplying {
		t.Fatalf("set status = %s, want applying for the new holder", st)
	}
	next, status, err := changeset.Open(ctx, f.pool, f.store, newFence, uuid.MustParse(f.project))
	if err != nil || status != agentsql.ChangeSetApplying {
		t.Fatalf("reopen by the new holder: %q, %v", status, err)
	}
	if _, err := next.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", "b.txt", "c.txt"} {
		if got := f.read(t, f.store, p); got != p {
			t.Errorf("%s after the new holder resumed = %q", p, got)
		}
	}
}

// TestMirrorKeptInStep: the Set answers reads from its own copy of the
// entries, updated by each write instead of read back. After every kind of
// write, successful or refused, the copy must equal the table.
func TestMirrorKeptInStep(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"base.txt": "base\n", "gone.txt": "gone\n", "src.txt": "src\n"})
	ctx := t.Context()
	steps := []struct {
		name string
		do   func() error
	}{
		{"write new", func() error { _, err := f.set.Write(ctx, f.project, "a.txt", []byte("a1")); return err }},
		{"write base file", func() error { _, err := f.set.Write(ctx, f.project, "base.txt", []byte("b1")); return err }},
		{"rewrite new", func() error { _, err := f.set.Write(ctx, f.project, "a.txt", []byte("a2")); return err }},
		{"delete base file", func() error { return f.set.Delete(ctx, f.project, "gone.txt") }},
		{"delete created file", func() error { return f.set.Delete(ctx, f.project, "a.txt") }},
		{"delete missing file (refused)", func() error {
			if err := f.set.Delete(ctx, f.project, "nope.txt"); !errors.Is(err, storage.ErrNotFound) {
				return fmt.Errorf("delete of a missing file = %v, want ErrNotFound", err)
			}
			return nil
		}},
		{"move", func() error { return f.set.Move(ctx, f.project, "src.txt", "dst.txt", false) }},
		{"move onto existing (refused)", func() error {
			if err := f.set.Move(ctx, f.project, "base.txt", "dst.txt", false); !errors.Is(err, storage.ErrExists) {
				return fmt.Errorf("move onto an existing file = %v, want ErrExists", err)
			}
			return nil
		}},
		{"conditional write, stale version (refused)", func() error {
			if _, err := f.set.WriteIf(ctx, f.project, "base.txt", []byte("b2"), "stale"); !errors.Is(err, storage.ErrConflict) {
				return fmt.Errorf("write over a stale version = %v, want ErrConflict", err)
			}
			return nil
		}},
		{"write back a deleted file", func() error { _, err := f.set.Write(ctx, f.project, "gone.txt", []byte("back")); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		mirror, err := f.set.Entries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := agentsql.ListChangeEntries(ctx, f.pool, f.taskID)
		if err != nil {
			t.Fatal(err)
		}
		var table []agentsql.ChangeEntry
		for _, e := range rows {
			if !e.Void() {
				table = append(table, e)
			}
		}
		if got, want := describe(mirror), describe(table); got != want {
			t.Fatalf("after %s the Set's entries are\n%s\nthe table holds\n%s", st.name, got, want)
		}
	}
}

// describe renders entries with every field a build reads.
func describe(entries []agentsql.ChangeEntry) string {
	var out string
	for _, e := range entries {
		out += fmt.Sprintf("%d %s %s %q from=%q base=%q applied=%t prior=%+v\n",
			e.Ord, e.Path, e.Op, e.Content, e.FromPath, e.BaseETag, e.Applied, e.Prior)
	}
	return out
}

// racer is the real store with another writer stepping in at the moments
// an apply and its rollback check a file and then change it.
type racer struct {
	*storage.S3
	mu sync.Mutex
	// beforeChange runs before each write or delete of a path;
	// afterRead after each read. Each runs at most once a path.
	beforeChange, afterRead map[string]func()
}

func (r *racer) fire(hooks map[string]func(), p string) {
	r.mu.Lock()
	fn := hooks[p]
	delete(hooks, p)
	r.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (r *racer) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	c, info, err := r.S3.Read(ctx, projectID, p)
	r.fire(r.afterRead, p)
	return c, info, err
}

func (r *racer) Write(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, error) {
	r.fire(r.beforeChange, p)
	return r.S3.Write(ctx, projectID, p, content)
}

func (r *racer) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	r.fire(r.beforeChange, p)
	return r.S3.WriteIf(ctx, projectID, p, content, ifMatch)
}

func (r *racer) Delete(ctx context.Context, projectID, p string) error {
	r.fire(r.beforeChange, p)
	return r.S3.Delete(ctx, projectID, p)
}

func (r *racer) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	r.fire(r.beforeChange, p)
	return r.S3.DeleteIf(ctx, projectID, p, ifMatch)
}

// TestApplyAndRollbackNeverOverwriteANewerFile: Apply's own conflict path
// on S3. Another writer changes a file the build deletes between the
// apply's check and its delete: the delete is refused (the file stays
// theirs) and the apply rolls back; during the rollback the other writer
// also changes a file the apply wrote, after the rollback checked it:
// that newer content stays, and everything else is put back.
func TestApplyAndRollbackNeverOverwriteANewerFile(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"upd.txt": "old\n", "del.txt": "doomed\n", "keep.txt": "keep\n"})
	ctx := t.Context()
	theirs := func(p, content string) func() {
		return func() {
			if _, err := f.store.Write(ctx, f.project, p, []byte(content)); err != nil {
				t.Error(err)
			}
		}
	}
	r := &racer{S3: f.store, afterRead: map[string]func(){}, beforeChange: map[string]func(){}}
	set, _, err := changeset.Open(ctx, f.pool, r, f.fence, uuid.MustParse(f.project))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Write(ctx, f.project, "new.txt", []byte("created\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Write(ctx, f.project, "upd.txt", []byte("updated\n")); err != nil {
		t.Fatal(err)
	}
	if err := set.Delete(ctx, f.project, "del.txt"); err != nil {
		t.Fatal(err)
	}
	r.beforeChange["del.txt"] = func() {
		theirs("del.txt", "theirs, after the check\n")()
		// The rollback checks upd.txt (it holds the build's content),
		// then someone writes it.
		r.mu.Lock()
		r.afterRead["upd.txt"] = theirs("upd.txt", "theirs, during the rollback\n")
		r.mu.Unlock()
	}
	_, err = set.Apply(ctx, []byte(`{}`))
	var ce *storage.ConflictError
	if !errors.As(err, &ce) || ce.Path != "del.txt" {
		t.Fatalf("apply = %v, want a conflict naming del.txt", err)
	}
	for p, want := range map[string]string{
		"new.txt":  "<missing>",
		"upd.txt":  "theirs, during the rollback\n",
		"del.txt":  "theirs, after the check\n",
		"keep.txt": "keep\n",
	} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if st, _, _ := agentsql.ChangeSetState(ctx, f.pool, f.taskID); st != agentsql.ChangeSetDiscarded {
		t.Errorf("set status = %s, want discarded", st)
	}
}
