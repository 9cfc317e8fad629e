package changeset_test

import (
	"errors"
	"fmt"
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
	project string
}

func setup(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	f := &fixture{pool: dbtest.New(t), store: s3test.NewStore(t)}
	projectID := uuid.New()
	f.project = projectID.String()
	if err := f.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'x') RETURNING id`, projectID).Scan(&f.taskID); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if _, err := f.store.Write(t.Context(), f.project, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	f.set, _, err = changeset.Open(t.Context(), f.pool, f.store, f.taskID, projectID)
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
				var taskID uuid.UUID
				if err := pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'x') RETURNING id`, projectID).Scan(&taskID); err != nil {
					t.Fatalf("insert build task: %v", err)
				}
				set, _, err := changeset.Open(t.Context(), pool, b.newBase(t), taskID, projectID)
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
	if err := agentsql.MarkChangeSetApplying(ctx, f.pool, f.taskID, []byte(`{"summary":"s"}`)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"f0.txt", "f1.txt"} {
		if _, err := f.store.Write(ctx, f.project, p, []byte("new\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := agentsql.MarkChangeEntryApplied(ctx, f.pool, f.taskID, "f0.txt"); err != nil {
		t.Fatal(err)
	}
	// A new attempt reopens the set, sees it applying, and resumes — twice.
	set, status, err := changeset.Open(ctx, f.pool, f.store, f.taskID, uuid.MustParse(f.project))
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
	// b.txt: the conditional write must refuse to overwrite it.
	if err := agentsql.MarkChangeSetApplying(ctx, f.pool, f.taskID, []byte(`{}`)); err != nil {
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
	for p, want := range map[string]string{"a.txt": "new a.txt", "b.txt": "theirs\n"} {
		if got := f.read(t, f.store, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
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
