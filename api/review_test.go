package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/s3test"
)

// TestApproveConflict: approving a build whose file was changed in storage
// since the build read it answers 409 CHANGE_CONFLICT naming the file;
// nothing is applied and the task stays in review. A build whose files are
// as it read them is approved: queued for a worker to apply.
func TestApproveConflict(t *testing.T) {
	t.Parallel()
	store := s3test.NewStore(t)
	e := setup(t, envOpts{store: store})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	read, err := store.Write(t.Context(), project.String(), "a.txt", []byte("old\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := e.insertBuild(t, project, agentsql.StatusReview, `{"summary": "wrote a.txt"}`, agentsql.ChangeSetOpen,
		agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("new\n"), BaseETag: read.ETag})
	if _, err := store.Write(t.Context(), project.String(), "a.txt", []byte("theirs\n")); err != nil {
		t.Fatal(err)
	}
	path := "/v1/tasks/" + id.String() + "/approve"
	rp := e.call(t, http.MethodPost, path, tok, "", nil)
	if rp.status != http.StatusConflict || errorCode(t, rp) != api.CodeChangeConflict || !strings.Contains(string(rp.body), "a.txt") {
		t.Fatalf("approve over a changed file: %d %s, want 409 CHANGE_CONFLICT naming a.txt", rp.status, rp.body)
	}
	task, err := agentsql.GetTask(t.Context(), e.pool, id)
	if err != nil || task.Status != agentsql.StatusReview || task.Approved {
		t.Fatalf("after the conflict: %s approved=%v (%v), want still in review", task.Status, task.Approved, err)
	}
	if c, _, _ := store.Read(t.Context(), project.String(), "a.txt"); string(c) != "theirs\n" {
		t.Errorf("a.txt = %q, want the other writer's", c)
	}

	again := e.insertBuild(t, project, agentsql.StatusReview, `{"summary": "wrote b.txt"}`, agentsql.ChangeSetOpen,
		agentsql.ChangeEntry{Path: "b.txt", Op: agentsql.ChangeWrite, Content: []byte("b\n")})
	rp = e.call(t, http.MethodPost, "/v1/tasks/"+again.String()+"/approve", tok, "", nil)
	if rp.status != http.StatusOK {
		t.Fatalf("approve: %d %s", rp.status, rp.body)
	}
	if task, err := agentsql.GetTask(t.Context(), e.pool, again); err != nil || task.Status != agentsql.StatusQueued || !task.Approved {
		t.Errorf("after approve: %s approved=%v (%v), want queued to apply", task.Status, task.Approved, err)
	}
}

// TestRejectAndComments: comments name a file and line of the diff, a line
// the revision under review holds (else 400 naming the file and its
// length); a reject's feedback is kept as a comment and queues the task; a reject
// without feedback cancels it; both are audited.
func TestRejectAndComments(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	tok := e.token(t, "alice", "", project)
	id := e.insertBuild(t, project, agentsql.StatusReview, `{"summary": "wrote a.txt"}`, agentsql.ChangeSetOpen,
		agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("new\n")},
		agentsql.ChangeEntry{Path: "gone.txt", Op: agentsql.ChangeDelete, BaseETag: "e1"})
	base := "/v1/tasks/" + id.String()
	for _, tt := range []struct {
		name, body string
		want       int
		says       string // in the refusal's message
	}{
		{"Empty", `{"body": " "}`, http.StatusBadRequest, "body"},
		{"LineWithoutPath", `{"body": "x", "line": 3}`, http.StatusBadRequest, "path"},
		{"BadPath", `{"body": "x", "path": "../etc/passwd"}`, http.StatusBadRequest, "path"},
		{"LinePastEnd", `{"body": "x", "path": "a.txt", "line": 99}`, http.StatusBadRequest, "a.txt has 1 line"},
		{"LineOfUnchangedFile", `{"body": "x", "path": "b.txt", "line": 1}`, http.StatusBadRequest, "b.txt is not changed"},
		{"PastLastLine", `{"body": "x", "path": "a.txt", "line": 2}`, http.StatusBadRequest, "a.txt has 1 line"},
		{"LineOfDeletedFile", `{"body": "x", "path": "gone.txt", "line": 1}`, http.StatusBadRequest, "gone.txt is deleted"},
		{"OnDeletedFile", `{"body": "keep it", "path": "gone.txt"}`, http.StatusCreated, ""},
		{"OnLine", `{"body": "name it greeting", "path": "a.txt", "line": 1}`, http.StatusCreated, ""},
	} {
		rp := e.call(t, http.MethodPost, base+"/comments", tok, tt.body, nil)
		if rp.status != tt.want || !strings.Contains(string(rp.body), tt.says) {
			t.Errorf("%s: comment answered %d %s, want %d saying %q", tt.name, rp.status, rp.body, tt.want, tt.says)
		}
	}
	if rp := e.call(t, http.MethodGet, base+"/comments", e.token(t, "mallory", "", uuid.New()), "", nil); rp.status != http.StatusForbidden {
		t.Errorf("another project's bearer read the comments: %d", rp.status)
	}
	rp := e.call(t, http.MethodPost, base+"/reject", tok, `{"feedback": "use a greeting"}`, nil)
	if rp.status != http.StatusOK {
		t.Fatalf("reject with feedback: %d %s", rp.status, rp.body)
	}
	var got struct{ Comments []agentsql.Comment }
	e.get(t, base+"/comments", tok, &got)
	if len(got.Comments) != 3 || got.Comments[1].Path != "a.txt" || got.Comments[1].Line == nil || *got.Comments[1].Line != 1 ||
		got.Comments[2].Body != "use a greeting" || got.Comments[2].Author != "user:alice" {
		b, _ := json.Marshal(got)
		t.Errorf("comments = %s", b)
	}
	if task, _ := agentsql.GetTask(t.Context(), e.pool, id); task.Status != agentsql.StatusQueued {
		t.Errorf("after reject with feedback: %s, want queued", task.Status)
	}

	other := e.insertBuild(t, project, agentsql.StatusReview, `{"summary": "wrote a.txt"}`, agentsql.ChangeSetOpen,
		agentsql.ChangeEntry{Path: "a.txt", Op: agentsql.ChangeWrite, Content: []byte("new\n")})
	if rp := e.call(t, http.MethodPost, "/v1/tasks/"+other.String()+"/reject", tok, "", nil); rp.status != http.StatusOK {
		t.Fatalf("reject without feedback: %d %s", rp.status, rp.body)
	}
	var status, setStatus string
	var audits int
	if err := e.pool.QueryRow(t.Context(), `SELECT t.status, s.status,
			(SELECT count(*) FROM agent_events WHERE task_id = t.id AND payload -> 'metadata' ->> 'action' = 'reject')
		FROM ai_tasks t JOIN change_sets s ON s.task_id = t.id WHERE t.id = $1`, other).Scan(&status, &setStatus, &audits); err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" || setStatus != agentsql.ChangeSetDiscarded || audits != 1 {
		t.Errorf("after reject without feedback: task %s, set %s, %d audit events", status, setStatus, audits)
	}
}

// TestApproveCreatedThenMoved: a build that created src/old.ts and moved
// it to src/new.ts staged a void delete of a file storage never held; the
// approve is no conflict, on the local store and on MinIO alike.
func TestApproveCreatedThenMoved(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) storage.Store
	}{
		{"Local", func(t *testing.T) storage.Store {
			s, err := storage.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"MinIO", func(t *testing.T) storage.Store { return s3test.NewStore(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{store: tt.store(t)})
			project := uuid.New()
			tok := e.token(t, "alice", "", project)
			id := e.insertBuild(t, project, agentsql.StatusReview, `{"summary": "moved a new file"}`, agentsql.ChangeSetOpen,
				agentsql.ChangeEntry{Path: "src/new.ts", Op: agentsql.ChangeWrite, Content: []byte("x\n"), FromPath: "src/old.ts"},
				agentsql.ChangeEntry{Path: "src/old.ts", Op: agentsql.ChangeDelete})
			rp := e.call(t, http.MethodPost, "/v1/tasks/"+id.String()+"/approve", tok, "", nil)
			if rp.status != http.StatusOK {
				t.Fatalf("approve of a created-then-moved file: %d %s, want 200", rp.status, rp.body)
			}
			if task, err := agentsql.GetTask(t.Context(), e.pool, id); err != nil || task.Status != agentsql.StatusQueued || !task.Approved {
				t.Errorf("after approve: %s approved=%v (%v), want queued to apply", task.Status, task.Approved, err)
			}
		})
	}
}
