package tools_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestDeleteFile runs delete_file against the project's store, as chat and
// plan tasks see it, and against a build's change set: a missing file is
// "not found" and makes no change (so no file_update event) in both.
func TestDeleteFile(t *testing.T) {
	t.Parallel()
	for _, st := range taskStores() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			base, projectID := projectWithA(t)
			env := tools.Env{Store: st.open(t, base, projectID), ProjectID: projectID.String()}
			reg := buildTools(t)

			for _, step := range []struct {
				name, path string
				wantOK     bool
			}{
				{name: "Missing", path: "missing.txt"},
				{name: "Present", path: "a.txt", wantOK: true},
				{name: "AlreadyDeleted", path: "a.txt"},
			} {
				r := reg.Call(t.Context(), env, "delete_file", args(map[string]string{"path": step.path}))
				if step.wantOK {
					want := []events.FileUpdate{{Path: step.path, Op: events.OpDelete, Summary: "deleted " + step.path}}
					if !r.Success || len(r.Changes) != 1 || r.Changes[0] != want[0] {
						t.Errorf("%s: delete_file(%q) = %+v, want success with change %+v", step.name, step.path, r, want[0])
					}
					continue
				}
				if r.Success || len(r.Changes) != 0 || !strings.Contains(r.Output, "file not found: "+step.path) {
					t.Errorf("%s: delete_file(%q) = %+v, want \"file not found\" and no change", step.name, step.path, r)
				}
			}
			if _, _, err := env.Store.Read(t.Context(), env.ProjectID, "a.txt"); err == nil {
				t.Errorf("a.txt still readable after delete_file")
			}
		})
	}
}

// taskStore opens the store a task's tools see over a project's base store.
type taskStore struct {
	name string
	open func(t *testing.T, base storage.Store, projectID uuid.UUID) storage.Store
}

// taskStores are the project's store itself, as chat and plan tasks see
// it, and a build's change set over it.
func taskStores() []taskStore {
	return []taskStore{
		{name: "Store", open: func(t *testing.T, base storage.Store, _ uuid.UUID) storage.Store { return base }},
		{name: "ChangeSet", open: func(t *testing.T, base storage.Store, projectID uuid.UUID) storage.Store {
			t.Helper()
			pool := dbtest.New(t)
			fence := dbtest.HeldBuild(t, pool, projectID, "x")
			set, _, err := changeset.Open(t.Context(), pool, base, fence, projectID)
			if err != nil {
				t.Fatalf("open change set: %v", err)
			}
			return set
		}},
	}
}

// projectWithA returns a local store holding one project with a.txt.
func projectWithA(t *testing.T) (*storage.Local, uuid.UUID) {
	t.Helper()
	base, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	projectID := uuid.New()
	if _, err := base.Write(t.Context(), projectID.String(), "a.txt", []byte("a")); err != nil {
		t.Fatal(err)
	}
	return base, projectID
}

// buildTools returns the tools of a build task.
func buildTools(t *testing.T) *tools.Registry {
	t.Helper()
	reg, err := tools.ForTaskType("build")
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
