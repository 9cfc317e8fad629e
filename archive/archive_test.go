package archive_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/handlers/tools"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

type env struct {
	pool  *pgxpool.Pool
	store *storage.S3
	arch  *archive.Archiver
	srv   *httptest.Server // the task stream, served with the archive
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{pool: dbtest.New(t), store: s3test.NewStore(t)}
	var err error
	if e.arch, err = archive.New(e.pool, e.store, archive.Config{TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	hub := sse.NewHub(e.pool, logger)
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		_ = hub.Run(ctx)
	}()
	streams := sse.NewStreams(e.pool, hub, sse.Config{Logger: logger, Archive: e.arch, Batch: 4})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tasks/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		if err := streams.TaskEvents(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	e.srv.Start()
	t.Cleanup(func() {
		<-hubDone
		e.srv.Close()
	})
	t.Cleanup(cancel)
	return e
}

// newTask inserts a task in a new project and gives it a timeline whose
// payloads hold what JSON encoders differ on (HTML characters, non-ASCII,
// line separators, nested objects), then cancels it: it is finished.
func (e *env) newTask(t *testing.T) agentsql.Task {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeBuild, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	e.emit(t, task, 0)
	e.finish(t, task.ID)
	return task
}

// emit writes a batch of varied events, marked with round.
func (e *env) emit(t *testing.T, task agentsql.Task, round int) {
	t.Helper()
	ok := true
	rec := events.NewRecorder(e.pool, task.ID, task.ProjectID)
	_, err := rec.Emit(t.Context(),
		events.AgentPhase{Phase: events.PhaseStarted, Status: "running", TaskType: "build", Attempt: round + 1},
		events.ToolCall{ToolName: "read_file", ArgsSummary: `"<a href='x'>&amp;</a>"`, Success: true, Duration: 3, ResultSummary: "é ü 漢字 \u2028 line"},
		events.Log{Level: events.LevelInfo, Message: "round " + strconv.Itoa(round), Metadata: map[string]any{"nested": map[string]any{"b": 2, "a": []any{1.5, "x", nil}}}},
		events.Progress{Kind: events.KindToolComplete, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), ToolName: "read_file", ToolSuccess: &ok, ToolResult: json.RawMessage(`{"success": true, "html": "<b>"}`)},
		events.FileUpdate{Path: "src/a.go", Op: events.OpUpdate},
	)
	if err != nil {
		t.Fatal(err)
	}
}

// archive archives the tasks, and fails the test if that fails.
func (e *env) archive(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	if err := e.arch.ArchiveTasks(t.Context(), ids); err != nil {
		t.Fatal(err)
	}
}

// retry retries the finished task, gives it a round of events and
// finishes it again.
func (e *env) retry(t *testing.T, task agentsql.Task, round int) {
	t.Helper()
	if _, err := agentsql.ControlTask(t.Context(), e.pool, task.ID, agentsql.ActionRetry, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	e.emit(t, task, round)
	e.finish(t, task.ID)
}

func (e *env) finish(t *testing.T, id uuid.UUID) {
	t.Helper()
	if _, err := agentsql.ControlTask(t.Context(), e.pool, id, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) lastSeq(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT coalesce(max(seq), 0) FROM agent_events WHERE task_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// drop deletes the task's rows, as dropping their partition does.
func (e *env) drop(t *testing.T, id uuid.UUID) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), `DELETE FROM agent_events WHERE task_id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// stream reads the task's SSE stream from the cursor last (none when "")
// through the event with seq through, and returns its event frames as
// sent: "id: …\ndata: …\n\n" each.
func (e *env) stream(t *testing.T, id uuid.UUID, last string, through int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/v1/tasks/"+id.String()+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %s: %s", resp.Status, body)
	}
	var frames []string
	br := bufio.NewReader(resp.Body)
	var frame strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream of task %s after %d frames: %v", id, len(frames), err)
		}
		if strings.HasPrefix(line, "id: ") || frame.Len() > 0 {
			frame.WriteString(line)
		}
		if line == "\n" && frame.Len() > 0 {
			frames = append(frames, frame.String())
			idLine, _, _ := strings.Cut(frame.String(), "\n")
			seq, _ := strconv.Atoi(strings.TrimPrefix(idLine, "id: "))
			frame.Reset()
			if seq >= through {
				return frames
			}
		}
	}
}

// page reads the task's events through the JSON form of the route, page
// by page of limit after the cursor after, and returns each event as sent.
func (e *env) page(t *testing.T, id uuid.UUID, after, limit int) []string {
	t.Helper()
	var out []string
	for {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
			e.srv.URL+"/v1/tasks/"+id.String()+"/events?after="+strconv.Itoa(after)+"&limit="+strconv.Itoa(limit), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Events []json.RawMessage `json:"events"`
			Next   *int              `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("page after %d: %s, %v", after, resp.Status, err)
		}
		for _, ev := range page.Events {
			out = append(out, string(ev))
		}
		if page.Next == nil {
			return out
		}
		after = *page.Next
	}
}

// data is the data of SSE frames.
func data(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		_, rest, _ := strings.Cut(f, "\ndata: ")
		out[i] = strings.TrimSuffix(rest, "\n\n")
	}
	return out
}

// timeline reads the task's events through events.FollowArchived, from
// after through the seq through, each as the JSON the API serves.
func (e *env) timeline(t *testing.T, id uuid.UUID, after, through int) []string {
	t.Helper()
	var out []string
	err := events.FollowArchived(t.Context(), e.pool, e.arch, id, after, func(ev events.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		out = append(out, string(b))
		if ev.Seq >= through {
			return events.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objects lists the archive's objects.
func (e *env) objects(t *testing.T) []storage.FileInfo {
	t.Helper()
	objs, err := e.store.ListService(t.Context(), archive.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// object reads an archive object whole, decompressed.
func (e *env) object(t *testing.T, key string) string {
	t.Helper()
	body, _, err := e.store.OpenService(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	zr, err := gzip.NewReader(body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (e *env) state(t *testing.T, id uuid.UUID) agentsql.TaskArchive {
	t.Helper()
	st, err := agentsql.ReadTaskArchive(t.Context(), e.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("%s: %d items differ from the %d expected\ngot:\n%s\nwant:\n%s", what, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A finished task's timeline, archived and its rows dropped, reads back
// through SSE byte for byte, from every cursor, and through
// FollowArchived (agentworker follow) the same.
func TestArchivedTimelineReadsBackByteForByte(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	last := e.lastSeq(t, task.ID)
	before := e.stream(t, task.ID, "", last)
	if len(before) != last {
		t.Fatalf("%d frames before archiving, want %d", len(before), last)
	}
	lines := e.timeline(t, task.ID, 0, last)

	e.archive(t, task.ID)
	st := e.state(t, task.ID)
	if want := "_archive/" + task.ProjectID.String() + "/" + task.ID.String() + ".jsonl.gz"; st.Key != want || st.Seq != last || st.At.IsZero() {
		t.Fatalf("archive state %+v, want key %s through seq %d", st, want, last)
	}
	// The object is the API's JSON, a line each.
	if got := e.object(t, st.Key); got != strings.Join(lines, "\n")+"\n" {
		t.Errorf("archive object:\n%s\nwant:\n%s", got, strings.Join(lines, "\n"))
	}
	e.drop(t, task.ID)

	equal(t, "SSE data is the archive's lines", data(before), lines)
	equal(t, "SSE after the drop", e.stream(t, task.ID, "", last), before)
	for _, cur := range []int{1, 2, last - 1} {
		equal(t, "SSE from Last-Event-ID "+strconv.Itoa(cur), e.stream(t, task.ID, strconv.Itoa(cur), last), before[cur:])
	}
	equal(t, "FollowArchived after the drop", e.timeline(t, task.ID, 0, last), lines)
	equal(t, "JSON pages after the drop", e.page(t, task.ID, 0, 2), data(before))
	equal(t, "JSON pages from seq 3", e.page(t, task.ID, 3, 100), data(before[3:]))
	equal(t, "FollowArchived from seq 3", e.timeline(t, task.ID, 3, last), lines[3:])

	// Archiving again changes nothing.
	e.archive(t, task.ID)
	if again := e.state(t, task.ID); !again.At.Equal(st.At) {
		t.Errorf("archived again with nothing new: %+v, was %+v", again, st)
	}
}

// A task retried after it was archived gets new events; archived again,
// its archive is the old one followed by the new rows, and the timeline
// reads whole across the archive and the rows while only some are dropped.
func TestRetriedTaskMergesIntoItsArchive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	first := e.lastSeq(t, task.ID)
	all := e.timeline(t, task.ID, 0, first)
	e.archive(t, task.ID)
	e.drop(t, task.ID)

	if _, err := agentsql.ControlTask(t.Context(), e.pool, task.ID, agentsql.ActionRetry, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	e.emit(t, task, 1)
	// Unfinished: not archived, and said so.
	err := e.arch.ArchiveTasks(t.Context(), []uuid.UUID{task.ID})
	var unfinished *archive.UnfinishedError
	if !errors.As(err, &unfinished) || !errors.Is(err, archive.ErrUnfinished) || len(unfinished.Tasks) != 1 || unfinished.Tasks[0] != task.ID {
		t.Fatalf("ArchiveTasks of a running task = %v, want an UnfinishedError naming it", err)
	}
	e.finish(t, task.ID)
	second := e.lastSeq(t, task.ID)
	// The archive then the live rows: one timeline.
	all = append(all, e.timeline(t, task.ID, first, second)...)
	equal(t, "archive then rows", e.timeline(t, task.ID, 0, second), all)
	before := e.stream(t, task.ID, "", second)

	e.archive(t, task.ID)
	st := e.state(t, task.ID)
	if st.Seq != second {
		t.Fatalf("archived through %d, want %d", st.Seq, second)
	}
	if got := e.object(t, st.Key); got != strings.Join(all, "\n")+"\n" {
		t.Errorf("merged archive:\n%s\nwant:\n%s", got, strings.Join(all, "\n"))
	}
	e.drop(t, task.ID)
	equal(t, "merged timeline", e.timeline(t, task.ID, 0, second), all)
	equal(t, "merged SSE", e.stream(t, task.ID, "", second), before)
	if objs := e.objects(t); len(objs) != 1 {
		t.Errorf("%d archive objects, want 1: %+v", len(objs), objs)
	}
}

// A crash between the upload and the mark loses nothing and archives
// nothing twice: the mark is as it was, the rows are there, and a re-run
// writes the one object, complete, and marks it once. The same holds for a
// re-archive of a retried task, whose half-done object holds more than its
// mark says.
func TestCrashBetweenUploadAndMark(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	first := e.lastSeq(t, task.ID)
	all := e.timeline(t, task.ID, 0, first)
	crash := errors.New("crash")
	archive.SetAfterPut(e.arch, func(uuid.UUID) error { return crash })
	if err := e.arch.ArchiveTasks(t.Context(), []uuid.UUID{task.ID}); !errors.Is(err, crash) {
		t.Fatalf("ArchiveTasks = %v, want the crash", err)
	}
	if st := e.state(t, task.ID); st.Key != "" || st.Seq != 0 || !st.At.IsZero() {
		t.Fatalf("marked despite the crash: %+v", st)
	}
	if n := e.lastSeq(t, task.ID); n != first {
		t.Fatalf("rows through %d after the crash, want %d", n, first)
	}
	equal(t, "timeline after the crash", e.timeline(t, task.ID, 0, first), all)

	archive.SetAfterPut(e.arch, nil)
	e.archive(t, task.ID)
	st := e.state(t, task.ID)
	objs := e.objects(t)
	if len(objs) != 1 || objs[0].Path != st.Key || st.Seq != first {
		t.Fatalf("after the re-run: objects %+v, state %+v", objs, st)
	}
	if got := e.object(t, st.Key); got != strings.Join(all, "\n")+"\n" {
		t.Errorf("archive after the re-run:\n%s\nwant:\n%s", got, strings.Join(all, "\n"))
	}
	e.drop(t, task.ID)

	// Retried, then a re-archive crashes after its upload: the object
	// holds the new events, the mark does not.
	e.retry(t, task, 1)
	second := e.lastSeq(t, task.ID)
	all = append(all, e.timeline(t, task.ID, first, second)...)
	archive.SetAfterPut(e.arch, func(uuid.UUID) error { return crash })
	if err := e.arch.ArchiveTasks(t.Context(), []uuid.UUID{task.ID}); !errors.Is(err, crash) {
		t.Fatalf("ArchiveTasks = %v, want the crash", err)
	}
	if got := e.state(t, task.ID); got.Seq != first || !got.At.Equal(st.At) {
		t.Fatalf("mark moved by a crashed re-archive: %+v, was %+v", got, st)
	}
	equal(t, "timeline after the crashed re-archive", e.timeline(t, task.ID, 0, second), all)
	archive.SetAfterPut(e.arch, nil)
	e.archive(t, task.ID)
	st = e.state(t, task.ID)
	if objs := e.objects(t); len(objs) != 1 || st.Seq != second {
		t.Fatalf("after the re-run: objects %+v, state %+v", objs, st)
	}
	if got := e.object(t, st.Key); got != strings.Join(all, "\n")+"\n" {
		t.Errorf("merged archive after the re-run:\n%s\nwant:\n%s", got, strings.Join(all, "\n"))
	}
	e.drop(t, task.ID)
	equal(t, "merged timeline after the re-run", e.timeline(t, task.ID, 0, second), all)
}

// An archive that does not hold what its mark says is refused, never read
// as a shorter timeline: a stream reading it ends instead of skipping.
func TestCorruptArchiveIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	e.archive(t, task.ID)
	e.drop(t, task.ID)
	st := e.state(t, task.ID)
	lines := strings.SplitAfter(e.object(t, st.Key), "\n")
	for _, tc := range []struct {
		name, content string
	}{
		{"Truncated", strings.Join(lines[:2], "")},
		{"OutOfOrder", lines[1] + lines[0] + strings.Join(lines[2:], "")},
		{"NotJSON", "{" + strings.Join(lines, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write([]byte(tc.content))
			_ = zw.Close()
			if _, err := e.store.PutService(t.Context(), st.Key, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
				t.Fatal(err)
			}
			_, err := e.arch.ReadArchived(t.Context(), task.ID, 0, func(events.Event) error { return nil })
			if !errors.Is(err, archive.ErrCorrupt) {
				t.Errorf("ReadArchived = %v, want ErrCorrupt", err)
			}
		})
	}
}

// Removing a task's archive (retention deleting the task) leaves the
// others', and is repeatable.
func TestDeleteArchives(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a, b := e.newTask(t), e.newTask(t)
	e.archive(t, a.ID, b.ID, uuid.New())
	if objs := e.objects(t); len(objs) != 2 {
		t.Fatalf("%d objects, want 2", len(objs))
	}
	for range 2 {
		if err := e.arch.DeleteArchives(t.Context(), []uuid.UUID{a.ID, uuid.New()}); err != nil {
			t.Fatal(err)
		}
	}
	objs := e.objects(t)
	if len(objs) != 1 || objs[0].Path != e.arch.Key(b.ProjectID, b.ID) {
		t.Errorf("objects after deleting a's archive: %+v", objs)
	}
}

func TestNewRefusesAPrefixInsideProjects(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"archive/", "0b8f3f4e-0000-4000-8000-000000000000/", "_archive", "_a/../b/", "/_archive/"} {
		if _, err := archive.New(nil, nil, archive.Config{Prefix: prefix}); err == nil {
			t.Errorf("New with prefix %q succeeded", prefix)
		}
	}
	if _, err := archive.New(nil, nil, archive.Config{Prefix: "_events/v1/"}); err != nil {
		t.Errorf("New with prefix _events/v1/: %v", err)
	}
}

// The agent's tools cannot see or reach an archive: not in a listing of the
// project whose task was archived, not by a path that climbs out of it,
// not by a search.
func TestAgentToolsCannotReachTheArchive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	project := task.ProjectID.String()
	if _, err := e.store.Write(t.Context(), project, "src/a.go", []byte("package a\n")); err != nil {
		t.Fatal(err)
	}
	e.archive(t, task.ID)
	key := e.state(t, task.ID).Key
	reg, err := tools.ForTaskType(string(agentsql.TypeBuild))
	if err != nil {
		t.Fatal(err)
	}
	env := tools.Env{Store: e.store, ProjectID: project}
	rel := strings.TrimPrefix(key, "_archive/"+project+"/")
	for _, call := range []struct {
		tool, args string
		ok         bool
	}{
		{"list_files", `{"path": ""}`, true},
		{"list_files", `{"path": ".."}`, false},
		{"list_files", `{"path": "../_archive"}`, false},
		{"read_file", `{"path": "../` + key + `"}`, false},
		{"read_file", `{"path": "/` + key + `"}`, false},
		{"read_file", `{"path": "` + key + `"}`, false}, // inside the project: no such file
		{"read_file", `{"path": "` + rel + `"}`, false},
		{"search_files", `{"query": "task_id"}`, true},
		{"search_files", `{"query": "task_id", "path": "../_archive"}`, false},
		{"get_project_structure", `{}`, true},
	} {
		res := reg.Call(t.Context(), env, call.tool, call.args)
		if res.Success != call.ok {
			t.Errorf("%s(%s): success %t, want %t: %s", call.tool, call.args, res.Success, call.ok, res.Output)
		}
		if res.Success && (strings.Contains(res.Output, "_archive") || strings.Contains(res.Output, task.ID.String())) {
			t.Errorf("%s(%s) shows the archive: %s", call.tool, call.args, res.Output)
		}
	}
}

// Two archivers of one task take turns: the second waits for the first's
// mark, then finds nothing new. While one uploads, no transaction of the
// database holds an xid, so project streams are not held back by it.
func TestArchiversTakeTurnsWithoutAnXid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	task := e.newTask(t)
	other, err := archive.New(e.pool, e.store, archive.Config{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	uploading, release := make(chan struct{}), make(chan struct{})
	archive.SetAfterPut(e.arch, func(uuid.UUID) error {
		close(uploading)
		<-release
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- e.arch.ArchiveTasks(context.WithoutCancel(t.Context()), []uuid.UUID{task.ID}) }()
	<-uploading
	var xids int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND backend_xid IS NOT NULL`).Scan(&xids); err != nil {
		t.Fatal(err)
	}
	if xids != 0 {
		t.Errorf("%d transactions hold an xid while an archive uploads, want 0", xids)
	}
	second := make(chan error, 1)
	go func() { second <- other.ArchiveTasks(t.Context(), []uuid.UUID{task.ID}) }()
	poll.Until(t, "the second archiver waits for the first's lock", 10*time.Second, func() bool {
		var waiting bool
		err := e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database())`).Scan(&waiting)
		return err == nil && waiting
	})
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	st := e.state(t, task.ID)
	if objs := e.objects(t); len(objs) != 1 || st.Seq != e.lastSeq(t, task.ID) {
		t.Errorf("after two archivers: objects %+v, state %+v", objs, st)
	}
}

// Many tasks are archived at once; the unfinished one among them is named
// in the error and left as it was, a missing one is skipped.
func TestArchiveManyTasks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ids []uuid.UUID
	for range 6 {
		ids = append(ids, e.newTask(t).ID)
	}
	queued, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: agentsql.TypeChat, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	e.emit(t, queued, 0)
	err = e.arch.ArchiveTasks(t.Context(), append(ids, queued.ID, uuid.New()))
	var unfinished *archive.UnfinishedError
	if !errors.As(err, &unfinished) || len(unfinished.Tasks) != 1 || unfinished.Tasks[0] != queued.ID {
		t.Fatalf("ArchiveTasks = %v, want an UnfinishedError naming %s", err, queued.ID)
	}
	for _, id := range ids {
		if st := e.state(t, id); st.Seq != e.lastSeq(t, id) || st.Key != e.arch.Key(st.ProjectID, id) {
			t.Errorf("task %s: %+v", id, st)
		}
	}
	if st := e.state(t, queued.ID); st.Key != "" || st.Seq != 0 {
		t.Errorf("the unfinished task was marked: %+v", st)
	}
	if objs := e.objects(t); len(objs) != len(ids) {
		t.Errorf("%d objects, want %d", len(objs), len(ids))
	}
}
