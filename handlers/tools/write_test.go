package tools_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
)

// statCounting is a store that counts the lookups made of it: on S3 each
// is a request.
type statCounting struct {
	storage.Store
	stats *atomic.Int64
}

func (s statCounting) Stat(ctx context.Context, projectID, p string) (storage.FileInfo, error) {
	s.stats.Add(1)
	return s.Store.Stat(ctx, projectID, p)
}

// TestWriteFileTellsCreateFromUpdate: write_file's change says whether it
// created the file or changed it, as the build sees the project, on the
// project's store and on a build's change set. On the change set that
// costs no lookup of its own: the base is asked once per path, by the
// change set, for the version its first change is made against.
func TestWriteFileTellsCreateFromUpdate(t *testing.T) {
	t.Parallel()
	// lookups is how many Stats the base gets, by store (-1: any).
	lookups := map[string]int64{"Store": -1, "ChangeSet": 2}
	for _, st := range taskStores() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			local, projectID := projectWithA(t)
			base := statCounting{Store: local, stats: new(atomic.Int64)}
			env := tools.Env{Store: st.open(t, base, projectID), ProjectID: projectID.String()}
			reg := buildTools(t)
			for _, step := range []struct {
				tool, path string
				want       string
			}{
				{"write_file", "b.txt", events.OpCreate},
				{"write_file", "a.txt", events.OpUpdate},
				{"write_file", "b.txt", events.OpUpdate},
				{"delete_file", "a.txt", events.OpDelete},
				{"write_file", "a.txt", events.OpCreate},
			} {
				a := map[string]string{"path": step.path}
				if step.tool == "write_file" {
					a["content"] = "x"
				}
				r := reg.Call(t.Context(), env, step.tool, args(a))
				if !r.Success || len(r.Changes) != 1 || r.Changes[0].Op != step.want || r.Changes[0].Path != step.path {
					t.Errorf("%s(%q) = %+v, want one %s change of %s", step.tool, step.path, r, step.want, step.path)
				}
			}
			if got, want := base.stats.Load(), lookups[st.name]; want >= 0 && got != want {
				t.Errorf("the base store was looked up %d times, want %d (once per path the build changed)", got, want)
			}
		})
	}
}
