package handlers_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
)

// A build run to its end by the worker, archived and its rows dropped (as
// dropping their partition does), reads back the same through
// FollowArchived; the test logs the archive's size, the figure
// docs/operations.md sizes the archive with.
func TestBuildTimelineArchivedReadsBack(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("get_project_structure", m{}),
		call("read_file", m{"path": "src/App.tsx"}),
		call("write_file", m{"path": "src/lib/format.ts", "content": "export function money(n: number): string {\n  return `$${n.toFixed(2)}`\n}\n"}),
		call("edit_file", m{"path": "src/App.tsx", "old_string": "<h1>Shop</h1>", "new_string": "<h1>Shop</h1>\n      <p>{money(9.5)}</p>"}),
		call("edit_file", m{"path": "src/App.tsx", "old_string": "import React from 'react'\n", "new_string": "import React from 'react'\nimport { money } from './lib/format'\n"}),
		call("finish", m{"summary": "Prices shown with money() from src/lib/format.ts."}),
	}, handlers.Config{}, map[string]string{
		"package.json": `{"name":"app","dependencies":{"react":"^18.3.0"}}`,
		"src/App.tsx":  "import React from 'react'\n\nexport function App() {\n  return (\n    <div>\n      <h1>Shop</h1>\n    </div>\n  )\n}\n",
	})
	id := h.insert(t, "build", "show prices", nil)
	evs, task := h.wait(t, id)
	result(t, task)
	// The timeline as it stands once the task finished: its terminal event
	// may not be its last.
	var want []string
	last := evs[len(evs)-1].Seq
	if err := h.pool.QueryRow(t.Context(), `SELECT max(seq) FROM agent_events WHERE task_id = $1`, id).Scan(&last); err != nil {
		t.Fatal(err)
	}
	read := func(arch events.Archive) []string {
		t.Helper()
		var out []string
		err := events.FollowArchived(t.Context(), h.pool, arch, id, 0, func(ev events.Event) error {
			b, err := json.Marshal(ev)
			out = append(out, string(b))
			if ev.Seq >= last {
				return events.ErrStopFollowing
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want = read(nil)

	arch, err := archive.New(h.pool, h.store, archive.Config{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := arch.ArchiveTasks(t.Context(), []uuid.UUID{id}); err != nil {
		t.Fatal(err)
	}
	objs, err := h.store.ListService(t.Context(), archive.DefaultPrefix)
	if err != nil || len(objs) != 1 {
		t.Fatalf("archive objects %+v, %v", objs, err)
	}
	raw := len(strings.Join(want, "\n")) + 1
	t.Logf("build timeline: %d events, %d bytes of JSONL, archived in %d bytes (%.0f bytes an event)",
		len(want), raw, objs[0].Size, float64(objs[0].Size)/float64(len(want)))
	if _, err := h.pool.Exec(t.Context(), `DELETE FROM agent_events WHERE task_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got := read(arch); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("archived timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
