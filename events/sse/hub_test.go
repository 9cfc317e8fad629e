package sse_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// readCounter counts the statements that read agent_events, by who sent
// them: a stream reading its own task, or the hub reading for all of them.
type readCounter struct {
	stream, hub, project, floor, other atomic.Int64
}

func (c *readCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(data.SQL, "events_id_floor"):
		c.floor.Add(1)
	case strings.Contains(data.SQL, "unnest") && strings.Contains(data.SQL, "agent_events"):
		c.hub.Add(1)
	case strings.Contains(data.SQL, "FROM agent_events") && strings.Contains(data.SQL, "WHERE task_id = $1 AND seq > $2"):
		c.stream.Add(1)
	case strings.Contains(data.SQL, "pg_snapshot_xmin") && strings.Contains(data.SQL, "WHERE project_id = $1"):
		c.project.Add(1)
	default:
		c.other.Add(1)
	}
	return ctx
}

func (*readCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingPool is a pool on the test database whose reads of agent_events
// are counted.
func countingPool(t *testing.T, db *pgxpool.Pool) (*pgxpool.Pool, *readCounter) {
	t.Helper()
	cfg := db.Config().Copy()
	counter := &readCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter
}

// runHub runs hub until the test ends.
func runHub(t *testing.T, hub *sse.Hub) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = hub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-hub.Done()
	})
}

// TestHubReadsOnceForAllStreams: with many streams on the same tasks, an
// announcement costs one read of agent_events, by the hub, not one per
// stream, and no read of the tasks' floors; every stream still gets every
// event once, in seq order.
func TestHubReadsOnceForAllStreams(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	pool, reads := countingPool(t, db)
	hub := sse.NewHub(pool, slog.New(slog.DiscardHandler))
	// With no rechecks, a notification sent before the hub listens would be
	// lost for good: wait until it listens (it then wakes every subscriber).
	probe := hub.SubscribeTask(uuid.New())
	runHub(t, hub)
	select {
	case <-probe.C():
		probe.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("the hub did not listen within 20 s")
	}
	streams := sse.NewStreams(pool, hub, sse.Config{Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.Handle("GET /v1/tasks/{id}/events", serve(streams.TaskEvents))
	ctx, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	const tasks, perTask, rounds = 5, 4, 30
	projectID := uuid.New()
	ids := make([]uuid.UUID, tasks)
	recs := make([]*events.Recorder, tasks)
	for i := range ids {
		task, err := agentsql.InsertTask(t.Context(), db, agentsql.NewTask{ProjectID: projectID, Type: "build", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = task.ID
		recs[i] = events.NewRecorder(db, task.ID, projectID) // announced by the table's trigger
	}
	emitRound := func(round int) {
		t.Helper()
		for _, rec := range recs {
			if _, err := rec.Emit(t.Context(), events.Log{Level: events.LevelInfo, Message: strconv.Itoa(round)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	type stream struct {
		task uuid.UUID
		got  chan int
	}
	var all []stream
	var wg sync.WaitGroup
	client := &sse.Client{}
	for _, id := range ids {
		for range perTask {
			s := stream{task: id, got: make(chan int, rounds+2)}
			all = append(all, s)
			wg.Go(func() {
				_ = client.Follow(ctx, srv.URL+"/v1/tasks/"+id.String()+"/events", "", func(m sse.Message) error {
					s.got <- m.Event.Seq
					return nil
				})
			})
		}
	}
	t.Cleanup(wg.Wait)
	t.Cleanup(stop)
	next := func(s stream) int {
		t.Helper()
		select {
		case seq := <-s.got:
			return seq
		case <-time.After(20 * time.Second):
			t.Fatalf("stream of task %s: no event within 20 s", s.task)
			return 0
		}
	}
	// Rounds 0 and 1 connect everyone: each stream's first read is its
	// own, and one that connected while round 0 was announced reads the
	// table once more; once every stream has round 1, none is left to.
	for round := range 2 {
		emitRound(round)
		for _, s := range all {
			if seq := next(s); seq != round+1 {
				t.Fatalf("stream of task %s: seq %d, want %d", s.task, seq, round+1)
			}
		}
	}
	streamReads, hubReads, floorReads := reads.stream.Load(), reads.hub.Load(), reads.floor.Load()

	for round := 2; round < 2+rounds; round++ {
		emitRound(round)
		for _, s := range all {
			if seq := next(s); seq != round+1 {
				t.Fatalf("stream of task %s: seq %d, want %d", s.task, seq, round+1)
			}
		}
	}
	byStream := reads.stream.Load() - streamReads
	byHub := reads.hub.Load() - hubReads
	byFloor := reads.floor.Load() - floorReads
	t.Logf("%d rounds × %d tasks × %d streams: %d reads by streams, %d by the hub, %d of floors", rounds, tasks, perTask, byStream, byHub, byFloor)
	if byFloor != 0 {
		// A task's floor never moves back: the hub keeps it while it
		// follows the task, so that a read is one statement.
		t.Errorf("the task floors were read %d times once every stream had connected; want 0", byFloor)
	}
	if byStream != 0 {
		t.Errorf("streams read agent_events %d times themselves; want 0 (the hub reads for them)", byStream)
	}
	if max := int64(rounds * tasks); byHub < 1 || byHub > max {
		t.Errorf("the hub read %d times; want between 1 and %d (at most one per announcement)", byHub, max)
	}
}

// TestHubHandsRowsOrAsksToRead: a task subscription is handed the rows the
// hub read once its subscriber said how far it has read; before that, or
// when more arrive than it holds, it is told to read the table itself.
func TestHubHandsRowsOrAsksToRead(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	hub := sse.NewHub(db, slog.New(slog.DiscardHandler))
	task, err := agentsql.InsertTask(t.Context(), db, agentsql.NewTask{ProjectID: uuid.New(), Type: "build", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	sub := hub.SubscribeTask(task.ID)
	t.Cleanup(sub.Close)
	runHub(t, hub) // after subscribing: its connect wake-up is the first
	insert := func(n int) {
		t.Helper()
		evs := make([]agentsql.NewEvent, n)
		for i := range evs {
			evs[i] = agentsql.NewEvent{Type: "log", Payload: []byte(`{"level":"info","message":"x"}`)}
		}
		// One statement: the table's trigger announces it once.
		if _, err := agentsql.InsertEvents(t.Context(), db, task.ID, task.ProjectID, evs); err != nil {
			t.Fatal(err)
		}
	}
	waitWake := func() {
		t.Helper()
		select {
		case <-sub.C():
		case <-time.After(20 * time.Second):
			t.Fatal("no wake-up within 20 s")
		}
	}
	// The hub connects and wakes every subscriber to read once.
	waitWake()
	if rows, mustRead := sub.Take(); len(rows) != 0 || !mustRead {
		t.Fatalf("after connect: %d rows, mustRead %v; want none, true", len(rows), mustRead)
	}

	insert(2) // the subscriber has not said how far it read
	waitWake()
	if rows, mustRead := sub.Take(); len(rows) != 0 || !mustRead {
		t.Fatalf("unknown cursor: %d rows, mustRead %v; want none, true", len(rows), mustRead)
	}

	sub.Seen(2)
	insert(3)
	var seqs []int
	for len(seqs) < 3 {
		waitWake()
		rows, mustRead := sub.Take()
		if mustRead {
			t.Fatal("known cursor: told to read the table")
		}
		for _, r := range rows {
			seqs = append(seqs, *r.Seq)
		}
	}
	if want := []int{3, 4, 5}; !slices.Equal(seqs, want) {
		t.Fatalf("handed seqs %v, want %v", seqs, want)
	}

	// More than a subscription holds, untaken: it is dropped and the
	// subscriber reads the table.
	insert(1200)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if held, mustRead := sub.Held(); mustRead {
			if held != 0 {
				t.Fatalf("overflowed subscription still holds %d rows", held)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no overflow within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleStreamsReadNothing: streams with nothing new cost the database
// nothing, however many are open: no stream rereads on a timer. The one
// backstop for an event whose announcement was lost (its writer died between
// commit and announcement) is the hub's: one query per sweep for the whole
// process, which wakes only the streams of the events it finds.
func TestIdleStreamsReadNothing(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	pool, reads := countingPool(t, db)
	const sweep = 200 * time.Millisecond
	hub := sse.NewHub(pool, slog.New(slog.DiscardHandler), sse.WithSweep(sweep))
	runHub(t, hub)
	streams := sse.NewStreams(pool, hub, sse.Config{Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.Handle("GET /v1/tasks/{id}/events", serve(streams.TaskEvents))
	mux.Handle("GET /v1/projects/{id}/events", serve(streams.ProjectEvents))
	ctx, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	const n = 10 // task streams, and as many project streams
	type stream struct {
		url string
		got chan sse.Message
	}
	var all []stream
	var tasks []uuid.UUID
	var projects []uuid.UUID
	for range n {
		project := uuid.New()
		task, err := agentsql.InsertTask(t.Context(), db, agentsql.NewTask{ProjectID: project, Type: "build", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := events.NewRecorder(db, task.ID, project).Emit(t.Context(), events.Log{Level: events.LevelInfo, Message: "first"}); err != nil {
			t.Fatal(err)
		}
		tasks, projects = append(tasks, task.ID), append(projects, project)
		all = append(all, stream{url: srv.URL + "/v1/tasks/" + task.ID.String() + "/events", got: make(chan sse.Message, 8)},
			stream{url: srv.URL + "/v1/projects/" + project.String() + "/events", got: make(chan sse.Message, 8)})
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(stop)
	for _, s := range all {
		wg.Go(func() {
			_ = (&sse.Client{}).Follow(ctx, s.url, "", func(m sse.Message) error {
				s.got <- m
				return nil
			})
		})
	}
	next := func(s stream, what string) sse.Message {
		t.Helper()
		select {
		case m := <-s.got:
			return m
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no %s event within 20 s", s.url, what)
			return sse.Message{}
		}
	}
	for _, s := range all {
		next(s, "first")
	}

	// Settled first: two sweeps in a row without a read by a stream (a
	// stream's last catch-up after its first event may still be under way
	// on a loaded machine, and a project stream rereads while a transaction
	// elsewhere in the cluster holds its events back).
	byStreamsNow := func() int64 { return reads.stream.Load() + reads.project.Load() }
	for quiet, last, at, n := 0, byStreamsNow(), reads.other.Load(), 0; quiet < 2 && n < 50; n++ {
		poll.Until(t, "a sweep", 30*time.Second, func() bool { return reads.other.Load() > at })
		at = reads.other.Load()
		if now := byStreamsNow(); now != last {
			quiet, last = 0, now
		} else {
			quiet++
		}
	}
	// Idle: ten sweeps, in which the streams read nothing.
	streamReads, projectReads, other := reads.stream.Load(), reads.project.Load(), reads.other.Load()
	start := time.Now()
	const sweeps = 10
	poll.Until(t, "ten sweeps", 30*time.Second, func() bool { return reads.other.Load()-other >= sweeps })
	window := time.Since(start)
	byStreams := reads.stream.Load() - streamReads + reads.project.Load() - projectReads
	t.Logf("%d idle streams over %s: %d reads by streams, %d sweep statements", len(all), window.Round(time.Millisecond), byStreams, sweeps)
	if byStreams != 0 {
		t.Errorf("idle streams read agent_events %d times in %s; want 0", byStreams, window)
	}
	if window < (sweeps-2)*sweep { // ten ticks span nine intervals at least
		t.Errorf("%d statements in %s: more than one per %s sweep", sweeps, window, sweep)
	}

	// An event committed without an announcement still reaches its streams.
	tx, err := db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT set_config('agentworker.announce', 'after_commit', true)"); err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecorder(tx, tasks[3], projects[3]).Emit(t.Context(), events.Log{Level: events.LevelInfo, Message: "unannounced"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range all[6:8] { // task 3's stream and its project's
		if m := next(s, "unannounced"); m.Event.TaskID != tasks[3] || m.Event.Seq != 2 {
			t.Errorf("%s: event %+v, want task %s seq 2", s.url, m.Event, tasks[3])
		}
	}
}
