package sse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

type env struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
	stop context.CancelFunc // shuts the server's streams down
}

type envOpts struct {
	cfg sse.Config
}

// setup serves the streams on their /v1 paths, without the API's guard
// (package api tests that).
func setup(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{pool: dbtest.New(t)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	hub := sse.NewHub(e.pool, logger)
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		_ = hub.Run(ctx)
	}()
	cfg := o.cfg
	cfg.Logger = logger
	streams := sse.NewStreams(e.pool, hub, cfg)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/tasks/{id}/events", serve(streams.TaskEvents))
	mux.Handle("GET /v1/projects/{id}/events", serve(streams.ProjectEvents))
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	e.srv.Start()
	t.Cleanup(func() {
		<-hubDone
		e.srv.Close()
	})
	t.Cleanup(cancel) // first: streams end, then the server closes
	return e
}

// serve answers a stream's refusal with 400.
func serve(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}
}

func (e *env) newTask(t testing.TB, projectID uuid.UUID) uuid.UUID {
	t.Helper()
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: projectID, Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return task.ID
}

func (e *env) taskURL(id uuid.UUID) string { return e.srv.URL + "/v1/tasks/" + id.String() + "/events" }
func (e *env) projectURL(id uuid.UUID) string {
	return e.srv.URL + "/v1/projects/" + id.String() + "/events"
}

// collect follows url until it has n events or the deadline passes.
func collect(t *testing.T, c *sse.Client, url, after string, n int) []sse.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var got []sse.Message
	errDone := errors.New("done")
	err := c.Follow(ctx, url, after, func(m sse.Message) error {
		got = append(got, m)
		if len(got) == n {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("follow %s: got %d of %d events: %v", url, len(got), n, err)
	}
	return got
}

// canon renders v as canonical JSON (jsonb reorders object keys).
func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(x)
	return string(b)
}

// everyPayload holds one payload of every event type and progress kind.
func everyPayload() []events.Payload {
	ts := time.Date(2025, 11, 29, 14, 0, 0, 123000000, time.UTC)
	ok := true
	return []events.Payload{
		events.AgentPhase{Phase: events.PhaseStarted, Status: "running", TaskType: "build", Model: "m", Attempt: 1},
		events.AgentPhase{Phase: events.PhaseCoder, Action: "enter", Summary: "writing"},
		events.ToolCall{ToolName: "move_file", ArgsSummary: "a → b", ResultSummary: "moved", Success: true, Duration: 12, FromPath: "a", ToPath: "b"},
		events.FileUpdate{Path: "src/new.ts", Op: events.OpMove, FromPath: "src/old.ts", ToPath: "src/new.ts", Summary: "moved", FileSize: 10, MimeType: "text/plain"},
		events.SelfRepair{AttemptNumber: 1, MaxAttempts: 3, Trigger: "tests failed", ErrorType: "build", ErrorMessage: "x", Suggestion: "y", Result: "pending"},
		events.Log{Level: events.LevelWarn, Message: "hello ✓", Metadata: map[string]any{"raw": true, "n": 2.0}},
		events.Error{ErrorType: "llm_error", Message: "bad", Stack: "s", Recoverable: true},
		events.Progress{Kind: events.KindStageEnter, Timestamp: ts, Stage: "claim", Message: "m"},
		events.Progress{Kind: events.KindStageExit, Timestamp: ts, Stage: "claim"},
		events.Progress{Kind: events.KindIterationStart, Timestamp: ts, Iteration: 1, TotalIterations: 25},
		events.Progress{Kind: events.KindToolStart, Timestamp: ts, ToolName: "write_file", ToolArgs: json.RawMessage(`{"path":"a.txt"}`)},
		events.Progress{Kind: events.KindToolComplete, Timestamp: ts, ToolName: "write_file", ToolResult: json.RawMessage(`{"ok":true}`), ToolSuccess: &ok, Duration: 3},
		events.Progress{Kind: events.KindThinking, Timestamp: ts},
		events.Progress{Kind: events.KindStreamDelta, Timestamp: ts, Delta: "Hel", MessageID: "m1", Seq: 1, TotalLength: 3},
		events.Progress{Kind: events.KindStreamComplete, Timestamp: ts, Content: "Hello\n\"quoted\"", MessageID: "m1", TotalLength: 14},
	}
}

func TestEveryEventTypeRoundTrips(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	taskID := e.newTask(t, projectID)
	want := everyPayload()
	if _, err := events.NewRecorder(e.pool, taskID, projectID).Emit(t.Context(), want...); err != nil {
		t.Fatal(err)
	}
	client := &sse.Client{}
	for name, url := range map[string]string{"Task": e.taskURL(taskID), "Project": e.projectURL(projectID)} {
		t.Run(name, func(t *testing.T) {
			got := collect(t, client, url, "", len(want))
			for i, m := range got {
				if m.Event.Seq != i+1 || m.Event.TaskID != taskID || m.Event.ProjectID != projectID || m.Event.Type != want[i].EventType() {
					t.Errorf("event %d: seq %d task %s project %s type %s", i, m.Event.Seq, m.Event.TaskID, m.Event.ProjectID, m.Event.Type)
				}
				p, err := m.Event.Decode()
				if err != nil {
					t.Fatal(err)
				}
				typed := reflect.ValueOf(p).Elem().Interface()
				if reflect.TypeOf(typed) != reflect.TypeOf(want[i]) || canon(t, typed) != canon(t, want[i]) {
					t.Errorf("event %d = %T %s, want %T %s", i, typed, canon(t, typed), want[i], canon(t, want[i]))
				}
				if name == "Task" && m.ID != strconv.Itoa(i+1) {
					t.Errorf("task stream id %q, want the seq %d", m.ID, i+1)
				}
			}
		})
	}
}

// cutter is a transport whose connections the test can drop mid-stream.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			c.mu.Lock()
			c.conns = append(c.conns, conn)
			c.mu.Unlock()
		}
		return conn, err
	}}}
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func TestResumeAfterCutExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	projectID := uuid.New()
	tasks := []uuid.UUID{e.newTask(t, projectID), e.newTask(t, projectID)}
	const perTask = 150
	for name, url := range map[string]string{"Task": e.taskURL(tasks[0]), "Project": e.projectURL(projectID)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			total := perTask
			if name == "Project" {
				total = perTask * len(tasks)
			}
			cut := &cutter{}
			client := &sse.Client{HTTPClient: cut.client(), Reconnect: 10 * time.Millisecond}
			// Writers keep going while the reader is cut off, more than once.
			var wg sync.WaitGroup
			for _, task := range tasks {
				wg.Go(func() {
					rec := events.NewRecorder(e.pool, task, projectID)
					for i := range perTask {
						if _, err := rec.Emit(context.Background(), events.Log{Level: events.LevelInfo, Message: strconv.Itoa(i)}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			seen := map[int64]int{}
			perTaskSeq := map[uuid.UUID]int{}
			cuts := 0
			errDone := errors.New("done")
			err := client.Follow(ctx, url, "", func(m sse.Message) error {
				seen[m.Event.ID]++
				// A task stream is in seq order. A project stream is in
				// transaction order, which two racing writers of one task
				// can make differ from seq order (docs/events.md).
				if name == "Task" && m.Event.Seq != perTaskSeq[m.Event.TaskID]+1 {
					t.Errorf("task %s: seq %d after %d", m.Event.TaskID, m.Event.Seq, perTaskSeq[m.Event.TaskID])
				}
				perTaskSeq[m.Event.TaskID] = m.Event.Seq
				if len(seen)%40 == 0 && seen[m.Event.ID] == 1 {
					cuts++
					cut.cut() // the network drops; Follow resumes with Last-Event-ID
				}
				if len(seen) == total {
					return errDone
				}
				return nil
			})
			wg.Wait()
			if !errors.Is(err, errDone) {
				t.Fatalf("follow: %v after %d events", err, len(seen))
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("event %d delivered %d times", id, n)
				}
			}
			if cuts < 3 {
				t.Errorf("only %d cuts", cuts)
			}
		})
	}
}

// TestProjectStreamCommitOrder: events whose ids commit out of order reach a
// live project stream, none skipped.
func TestProjectStreamCommitOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	ctx := t.Context()
	projectID := uuid.New()
	taskA, taskB := e.newTask(t, projectID), e.newTask(t, projectID)
	client := &sse.Client{}

	got := make(chan sse.Message, 100)
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	followDone := make(chan error, 1)
	go func() {
		followDone <- client.Follow(fctx, e.projectURL(projectID), "", func(m sse.Message) error {
			got <- m
			return nil
		})
	}()
	t.Cleanup(func() { fcancel(); <-followDone })

	insert := func(tx pgx.Tx, task uuid.UUID) int64 {
		t.Helper()
		rows, err := agentsql.InsertEvents(ctx, tx, task, projectID, []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"x"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return rows[0].ID
	}
	next := func() sse.Message {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10 s")
			return sse.Message{}
		}
	}
	var want, order []int64
	for round := range 5 {
		a, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if round%2 == 1 { // A's xid is older than B's, its id later
			if _, err := a.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
				t.Fatal(err)
			}
		}
		b, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var idA, idB int64
		if round%2 == 1 {
			idB, idA = insert(b, taskB), insert(a, taskA)
		} else {
			idA, idB = insert(a, taskA), insert(b, taskB)
		}
		first, second := b, a // the later id commits first in even rounds
		if round%2 == 1 {
			first, second = a, b
		}
		if err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := second.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, idA, idB)
		order = append(order, next().Event.ID, next().Event.ID)
	}
	slices.Sort(order)
	slices.Sort(want)
	if !slices.Equal(order, want) {
		t.Fatalf("project stream delivered %v, want each of %v once", order, want)
	}
}

func TestHeartbeatAndShutdown(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: sse.Config{Heartbeat: 20 * time.Millisecond}})
	projectID := uuid.New()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.projectURL(projectID), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	buf := make([]byte, 4096)
	var read strings.Builder
	for !strings.Contains(read.String(), ": heartbeat\n\n") {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("read before a heartbeat: %v (%q)", err, read.String())
		}
		read.Write(buf[:n])
	}
	// Shutdown (the serve context ends): the stream closes cleanly.
	e.stop()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5 s after shutdown")
	}
}

// TestClientSkipsNamedEvents: the client hands over task events only, not
// a named event such as the "expired" that ends a stream.
func TestClientSkipsNamedEvents(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 1000\n: connected\n\nid: 1\ndata: {\"seq\":1,\"type\":\"log\"}\n\nevent: expired\ndata: {\"message\":\"token expired\"}\n\n")
	}))
	t.Cleanup(srv.Close)
	var got []sse.Message
	last, err := (&sse.Client{}).Stream(t.Context(), srv.URL, "", func(m sse.Message) error {
		got = append(got, m)
		return nil
	})
	if err != nil || last != "1" || len(got) != 1 || got[0].Event.Seq != 1 {
		t.Fatalf("Stream = %q, %v; got %+v", last, err, got)
	}
}
