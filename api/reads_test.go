package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

// insertBuild creates a build task of project directly in status, without
// a River job, with a change set in setStatus made of entries.
func (e *env) insertBuild(t *testing.T, project uuid.UUID, status agentsql.Status, result string, setStatus string, entries ...agentsql.ChangeEntry) uuid.UUID {
	t.Helper()
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.skip_enqueue', 'on', true)"); err != nil {
		t.Fatal(err)
	}
	// Inserted queued, held (running: the change set's writes are fenced
	// by the holder), then moved to status.
	fence := dbtest.HeldBuild(t, tx, project, "change a.txt")
	id := fence.TaskID
	if _, _, err := agentsql.OpenChangeSet(t.Context(), tx, fence, project); err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if err := agentsql.PutChangeEntry(t.Context(), tx, fence, en); err != nil {
			t.Fatal(err)
		}
	}
	// The set first, as the runner does: a task that ends with its set
	// still open discards it.
	if _, err := tx.Exec(t.Context(), `UPDATE change_sets SET status = $2 WHERE task_id = $1`, id, setStatus); err != nil {
		t.Fatal(err)
	}
	if status != agentsql.StatusRunning {
		if _, err := tx.Exec(t.Context(), `UPDATE ai_tasks SET status = $2, result = nullif($3, '')::jsonb,
			finished_at = CASE WHEN $2 = 'succeeded' THEN now() END WHERE id = $1`, id, status, result); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	return id
}

// get calls a read route and decodes its answer into v.
func (e *env) get(t *testing.T, path, token string, v any) {
	t.Helper()
	rp := e.call(t, http.MethodGet, path, token, "", nil)
	if rp.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rp.status, rp.body)
	}
	if err := json.Unmarshal(rp.body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, rp.body)
	}
}

func TestReadRoutes(t *testing.T) {
	t.Parallel()
	store := s3test.NewStore(t)
	e := setup(t, envOpts{store: store})
	project := uuid.New()
	tok := e.token(t, "", "authenticated", project)
	ctx := t.Context()

	first := e.insertBuild(t, project, agentsql.StatusSucceeded, `{"summary": "wrote a.txt", "iterations": 2}`, agentsql.ChangeSetApplied,
		agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("hello\n")})
	written, err := store.Write(ctx, project.String(), "a.txt", []byte("hello\n"))
	if err != nil {
		t.Fatal(err)
	}
	second := e.insertBuild(t, project, agentsql.StatusRunning, "", agentsql.ChangeSetOpen,
		agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("hello, world\n"), BaseETag: written.ETag},
		agentsql.ChangeEntry{Path: "img.png", Op: agentsql.ChangeWrite, Content: []byte("\x89PNG\x00\x01")})
	chat, err := agentsql.InsertTask(ctx, e.pool, agentsql.NewTask{ProjectID: project, Type: agentsql.TypeChat, Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{".env": "SECRET=1\n", "bin.dat": "a\x00b", "src/b.txt": "bee\n"} {
		if _, err := store.Write(ctx, project.String(), path, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Tasks", func(t *testing.T) {
		var list api.TaskList
		e.get(t, "/v1/projects/"+project.String()+"/tasks", tok, &list)
		if len(list.Tasks) != 3 || list.Tasks[0].ID != chat.ID || list.Tasks[1].ID != second || list.Tasks[2].ID != first {
			t.Fatalf("tasks = %+v; want chat, second, first", list.Tasks)
		}
		if got := list.Tasks[2]; got.Summary != "wrote a.txt" || got.Iterations != 2 || got.Status != "succeeded" || got.Result != nil {
			t.Errorf("first in the list = %+v", got)
		}
		if !regexp.MustCompile(`^\d+-\d+$`).MatchString(list.Cursor) {
			t.Errorf("cursor %q is not a project stream cursor", list.Cursor)
		}
		var older api.TaskList
		e.get(t, "/v1/projects/"+project.String()+"/tasks?limit=1&before="+second.String(), tok, &older)
		if len(older.Tasks) != 1 || older.Tasks[0].ID != first {
			t.Errorf("before %s: %+v", second, older.Tasks)
		}
		for _, q := range []string{"?limit=0", "?limit=201", "?before=nope"} {
			if rp := e.call(t, http.MethodGet, "/v1/projects/"+project.String()+"/tasks"+q, tok, "", nil); rp.status != http.StatusBadRequest || errorCode(t, rp) != api.CodeValidation {
				t.Errorf("%s: %d %s", q, rp.status, rp.body)
			}
		}
	})

	t.Run("Task", func(t *testing.T) {
		var v api.TaskView
		e.get(t, "/v1/tasks/"+first.String(), tok, &v)
		if v.Summary != "wrote a.txt" || v.Iterations != 2 || !bytes.Contains(v.Result, []byte(`"iterations"`)) || v.ProjectID != project {
			t.Errorf("task = %+v", v)
		}
	})

	t.Run("Changes", func(t *testing.T) {
		var cs api.Changes
		e.get(t, "/v1/tasks/"+second.String()+"/changes", tok, &cs)
		if cs.Status != agentsql.ChangeSetOpen || len(cs.Files) != 2 {
			t.Fatalf("changes = %+v", cs)
		}
		want := "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello\n+hello, world\n"
		if f := cs.Files[0]; f.Op != "update" || !f.BeforeKnown || f.Diff != want {
			t.Errorf("a.txt = %+v, diff\n%s\nwant\n%s", f, f.Diff, want)
		}
		if f := cs.Files[1]; f.Op != "create" || !f.Binary || f.Diff != "" || f.Size != 6 {
			t.Errorf("img.png = %+v, want a binary creation", f)
		}
		e.get(t, "/v1/tasks/"+first.String()+"/changes", tok, &cs)
		if cs.Status != agentsql.ChangeSetApplied || len(cs.Files) != 1 || cs.Files[0].Op != "create" || !strings.Contains(cs.Files[0].Diff, "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hello\n") {
			t.Errorf("first build's changes = %+v", cs)
		}
		e.get(t, "/v1/tasks/"+chat.ID.String()+"/changes", tok, &cs)
		if cs.Status != "none" || len(cs.Files) != 0 {
			t.Errorf("a chat's changes = %+v", cs)
		}
	})

	t.Run("Files", func(t *testing.T) {
		var list struct{ Files []api.FileEntry }
		e.get(t, "/v1/projects/"+project.String()+"/files", tok, &list)
		var paths []string
		for _, f := range list.Files {
			paths = append(paths, f.Path)
		}
		if strings.Join(paths, ",") != "a.txt,bin.dat,src/b.txt" {
			t.Errorf("files = %v; want a.txt, bin.dat and src/b.txt (not .env)", paths)
		}
		var f api.FileContent
		e.get(t, "/v1/projects/"+project.String()+"/files/src/b.txt", tok, &f)
		if f.Content != "bee\n" || f.Size != 4 || f.ETag == "" || f.Binary {
			t.Errorf("src/b.txt = %+v", f)
		}
		var bin api.FileContent
		e.get(t, "/v1/projects/"+project.String()+"/files/bin.dat", tok, &bin)
		if !bin.Binary || bin.Content != "" || bin.Size != 3 {
			t.Errorf("bin.dat = %+v, want binary without content", bin)
		}
		for _, c := range []struct {
			path string
			want int
			code string
		}{
			{".env", http.StatusForbidden, api.CodeSensitiveFile},
			{"missing.txt", http.StatusNotFound, api.CodeNotFound},
			{"a%5Cb", http.StatusBadRequest, api.CodeValidation},
		} {
			rp := e.call(t, http.MethodGet, "/v1/projects/"+project.String()+"/files/"+c.path, tok, "", nil)
			if rp.status != c.want || errorCode(t, rp) != c.code {
				t.Errorf("%s: %d %s; want %d %s", c.path, rp.status, rp.body, c.want, c.code)
			}
			if bytes.Contains(rp.body, []byte("SECRET")) {
				t.Errorf("%s: the secret leaked: %s", c.path, rp.body)
			}
		}
		noStore := setup(t, envOpts{})
		if rp := noStore.call(t, http.MethodGet, "/v1/projects/"+project.String()+"/files", noStore.token(t, "", "", project), "", nil); rp.status != http.StatusServiceUnavailable {
			t.Errorf("without a store: %d %s", rp.status, rp.body)
		}
	})

	t.Run("Usage", func(t *testing.T) {
		for attempt, spend := range []struct {
			in, out int64
			cost    float64
		}{{100, 10, 0.5}, {20, 2, 0.25}} {
			if _, err := e.pool.Exec(ctx, `INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, tokens_out, cost, started_at)
				VALUES ($1, $2, $3, 'running', $4, $5, $6, now())`, first, attempt+1, uuid.NewString(), spend.in, spend.out, spend.cost); err != nil {
				t.Fatal(err)
			}
		}
		var u api.Usage
		e.get(t, "/v1/projects/"+project.String()+"/usage?days=7", tok, &u)
		today := time.Now().UTC().Format(time.DateOnly)
		if u.DaysRequested != 7 || len(u.Days) != 1 || u.Days[0].Day != today || u.Days[0].Runs != 2 || u.Days[0].Tasks != 1 ||
			u.Total.TokensIn != 120 || u.Total.TokensOut != 12 || u.Total.CostUSD != 0.75 {
			t.Errorf("usage = %+v", u)
		}
		if rp := e.call(t, http.MethodGet, "/v1/projects/"+project.String()+"/usage?days=400", tok, "", nil); rp.status != http.StatusBadRequest {
			t.Errorf("days=400: %d", rp.status)
		}
	})
}

// TestHostileRequests: what a client controls is bounded before it costs
// anything. A symlink in the local store is a missing file (404), not a
// failure; a name over 255 bytes or a path over 1024 is a 400 whatever the
// store, answered and logged in bounded size; a task body over 1 MB and a
// steering body over 64 kB are 413.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	var log logtest.Buffer
	e := setup(t, envOpts{store: store, log: &log})
	project := uuid.New()
	tok := e.token(t, "", "authenticated", project)
	if _, err := store.Write(t.Context(), project.String(), "a.txt", []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, project.String())
	for name, target := range map[string]string{"link.txt": "a.txt", "passwd": "/etc/passwd", "up": ".."} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	files := "/v1/projects/" + project.String() + "/files/"
	for _, c := range []struct {
		name, path string
		want       int
		code       string
	}{
		{"Symlink", "link.txt", http.StatusNotFound, api.CodeNotFound},
		{"SymlinkOut", "passwd", http.StatusNotFound, api.CodeNotFound},
		{"SymlinkDir", "up/" + project.String() + "/a.txt", http.StatusNotFound, api.CodeNotFound},
		{"Name256", strings.Repeat("n", 256), http.StatusBadRequest, api.CodeValidation},
		{"Path1025", strings.Repeat("p/", 512) + "x", http.StatusBadRequest, api.CodeValidation},
		{"Path900k", strings.Repeat("q", 900_000), http.StatusBadRequest, api.CodeValidation},
	} {
		rp := e.call(t, http.MethodGet, files+c.path, tok, "", nil)
		if rp.status != c.want || errorCode(t, rp) != c.code {
			t.Errorf("%s: %d %.300s; want %d %s", c.name, rp.status, rp.body, c.want, c.code)
		}
		if len(rp.body) > 1024 {
			t.Errorf("%s: a %d-byte answer", c.name, len(rp.body))
		}
	}
	var list struct{ Files []api.FileEntry }
	e.get(t, "/v1/projects/"+project.String()+"/files", tok, &list)
	if len(list.Files) != 1 || list.Files[0].Path != "a.txt" {
		t.Errorf("files = %+v, want a.txt alone", list.Files)
	}

	big := `{"type":"chat","prompt":"` + strings.Repeat("x", 1<<20) + `"}`
	if rp := e.call(t, http.MethodPost, "/v1/projects/"+project.String()+"/tasks", tok, big, nil); rp.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over 1 MB: %d %.200s, want 413", rp.status, rp.body)
	}
	task := e.newTask(t, project)
	answer := `{"answer":"` + strings.Repeat("y", 64<<10) + `"}`
	if rp := e.call(t, http.MethodPost, "/v1/tasks/"+task.ID.String()+"/answer", tok, answer, nil); rp.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a steering body over 64 kB: %d %.200s, want 413", rp.status, rp.body)
	}
	if strings.Contains(log.String(), "level=ERROR") || len(log.String()) > 4096 {
		t.Errorf("the API logged %d bytes: %.500s", len(log.String()), log.String())
	}
}

// TestTaskListTitleAndPausePending: the task list names a planned task by
// the title its plan gave it, and says of a running task that a pause of
// it is pending; the task's own answer says the same.
func TestTaskListTitleAndPausePending(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	var child uuid.UUID
	if err := e.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input)
		VALUES ($1, 'build', 'Write the parser. It reads…', '{"planned_task": {"key": "t1", "title": "Parser"}}') RETURNING id`, project).Scan(&child); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	running := dbtest.HeldBuild(t, tx, project, "take your time").TaskID
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(t.Context(), e.pool, running, agentsql.ActionPause, agentsql.ControlOpts{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	var list api.TaskList
	e.get(t, "/v1/projects/"+project.String()+"/tasks", tok, &list)
	got := map[uuid.UUID]api.TaskView{}
	for _, v := range list.Tasks {
		got[v.ID] = v
	}
	if got[child].Title != "Parser" || got[child].PausePending || !got[running].PausePending || got[running].Title != "" {
		t.Errorf("list: child title %q pending %v; running title %q pending %v", got[child].Title, got[child].PausePending, got[running].Title, got[running].PausePending)
	}
	var one api.TaskView
	e.get(t, "/v1/tasks/"+running.String(), tok, &one)
	if !one.PausePending || one.Status != "running" {
		t.Errorf("the running task: %s, pause pending %v", one.Status, one.PausePending)
	}
}
