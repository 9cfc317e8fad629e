package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	agentsql "github.com/agentworker/agentworker/sql"
)

// runEventDelivery measures how many events per second the writer path
// sustains, and write → LISTEN receipt latency at 1,000 events/s spread
// over 100 tasks.
func runEventDelivery(ctx context.Context, opts Options, r *Report) error {
	dur := 5 * time.Second
	if opts.Quick {
		dur = 2 * time.Second
	}
	db, err := newDatabase(ctx, opts.AdminURL, 30) // the server may allow only 100 clients in all
	if err != nil {
		return err
	}
	defer db.drop()
	const tasks = 100
	ids := make([]uuid.UUID, tasks)
	projects := make([]uuid.UUID, tasks)
	for i := range ids {
		t, err := agentsql.InsertTask(ctx, db.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "events"})
		if err != nil {
			return err
		}
		ids[i], projects[i] = t.ID, t.ProjectID
	}
	// The worker's write path: each write commits without notifying and the
	// process's one Announcer names the task after commit, coalesced.
	actx, stopAnnouncer := context.WithCancel(ctx)
	announcer := events.NewAnnouncer(db.pool, opts.Logger)
	announced := make(chan error, 1)
	go func() { announced <- announcer.Run(actx) }()
	defer func() { stopAnnouncer(); <-announced }()
	recs := make([]*events.Recorder, tasks)
	for i := range recs {
		recs[i] = events.NewRecorder(db.pool, ids[i], projects[i], events.WithAnnouncer(announcer))
	}
	ev := events.Log{Level: events.LevelInfo, Message: "bench event"}

	// Write rate: 8 writers, one event per statement, as fast as they go.
	// Writers stop at a deadline rather than by cancellation, so no write
	// is left running on the server when the next phase reads last_seq.
	var written atomic.Int64
	end := time.Now().Add(dur / 2)
	g, gctx := errgroup.WithContext(ctx)
	for w := range 8 {
		g.Go(func() error {
			for i := w; time.Now().Before(end); i += 8 {
				if _, err := recs[i%tasks].Emit(gctx, ev); err != nil {
					return err
				}
				written.Add(1)
			}
			return nil
		})
	}
	err = g.Wait()
	if err != nil {
		return fmt.Errorf("write events: %w", err)
	}
	r.EventsWrittenPerS = float64(written.Load()) / (dur / 2).Seconds()

	// Receipt latency: each task gets 10 events/s, staggered, so 1,000/s in all.
	var lastSeq [tasks]int
	if err := db.pool.QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
		return err
	}
	for i, id := range ids {
		if err := db.pool.QueryRow(ctx, "SELECT last_seq FROM ai_tasks WHERE id = $1", id).Scan(&lastSeq[i]); err != nil {
			return err
		}
	}
	type key struct {
		task uuid.UUID
		seq  int
	}
	// A notification names tasks, not events: the listener reads the named
	// tasks' events after their cursors, as a follower does, and an
	// event is received when that read returns it. (Counting only events
	// whose writer had returned when the notification arrived would push
	// an event announced before its Emit returned to the task's next
	// notification, 100 ms later.)
	var mu sync.Mutex
	sent := map[key]time.Time{}
	var receipts, writes []time.Duration
	cursor := map[uuid.UUID]int{}
	for i, id := range ids {
		cursor[id] = lastSeq[i]
	}
	// Each task's event floor, read once, as the hub keeps those of the
	// tasks it follows.
	floors, err := agentsql.TaskEventFloors(ctx, db.pool, ids)
	if err != nil {
		return err
	}
	floor := make(map[uuid.UUID]agentsql.EventFloor, tasks)
	for i, id := range ids {
		floor[id] = floors[i]
	}

	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		return err
	}
	total := int(dur.Seconds()) * 1000
	lctx, lcancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer lcancel()

	// The same events through the SSE gateway: one task stream per task.
	var sseMu sync.Mutex
	var sseReceipts []time.Duration
	var sseSeen [tasks]atomic.Int64 // the last seq each task stream delivered
	sseDone, stopSSE, err := sseSubscribers(lctx, opts, db, ids, lastSeq[:], total, func(task int, seq int, at time.Time) bool {
		sseSeen[task].Store(int64(seq))
		mu.Lock()
		t0, ok := sent[key{ids[task], seq}]
		mu.Unlock()
		if ok {
			sseMu.Lock()
			sseReceipts = append(sseReceipts, at.Sub(t0))
			sseMu.Unlock()
		}
		return ok
	})
	if err != nil {
		return err
	}
	defer stopSSE()
	listenDone := make(chan error, 1)
	go func() {
		got := 0
		for got < total {
			n, err := conn.Conn().WaitForNotification(lctx)
			if err != nil {
				listenDone <- fmt.Errorf("listener got %d of %d notifications: %w", got, total, err)
				return
			}
			var a agentsql.Announcement
			if json.Unmarshal([]byte(n.Payload), &a) != nil {
				continue
			}
			// One read for every named task, as the SSE hub does.
			var cursors []agentsql.TaskCursor
			mu.Lock()
			for _, t := range a.Tasks {
				if cur, ours := cursor[t]; ours {
					cursors = append(cursors, agentsql.TaskCursor{Task: t, AfterSeq: cur, Floor: floor[t]})
				}
			}
			mu.Unlock()
			rows, err := agentsql.TasksEventsAfter(lctx, db.pool, cursors, 1000)
			if err != nil {
				listenDone <- fmt.Errorf("listener read %d tasks: %w", len(cursors), err)
				return
			}
			at := time.Now()
			mu.Lock()
			for _, e := range rows {
				if t0, ok := sent[key{*e.TaskID, *e.Seq}]; ok {
					receipts = append(receipts, at.Sub(t0))
					got++
				}
				cursor[*e.TaskID] = *e.Seq
			}
			mu.Unlock()
		}
		listenDone <- nil
	}()

	// paced writes rounds events per task at 10/s each, staggered: 1,000/s
	// in all. Timed rounds record when each event was sent.
	paced := func(rounds int, timed bool) error {
		g, gctx := errgroup.WithContext(ctx)
		start := time.Now()
		for i := range ids {
			g.Go(func() error {
				offset := time.Duration(i) * time.Second / 10 / tasks
				for k := range rounds {
					due := start.Add(offset + time.Duration(k)*100*time.Millisecond)
					time.Sleep(time.Until(due)) // pacing the writers, not waiting for a result
					w0 := time.Now()
					if timed {
						mu.Lock()
						sent[key{ids[i], lastSeq[i] + k + 1}] = w0
						mu.Unlock()
					}
					if _, err := recs[i].Emit(gctx, ev); err != nil {
						return err
					}
					if timed {
						mu.Lock()
						writes = append(writes, time.Since(w0))
						mu.Unlock()
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("paced writers: %w", err)
		}
		for i := range lastSeq {
			lastSeq[i] += rounds
		}
		return nil
	}
	// Warm-up, untimed: one second at the same rate, until the listener and
	// every stream have it all, so the clock starts in the steady state:
	// every stream connected, every pool connection open with its
	// statements prepared (on a loaded machine that setup takes longer than
	// any fixed sleep, and it is not receipt).
	if err := paced(10, false); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	caughtUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i, id := range ids {
			if cursor[id] < lastSeq[i] || sseSeen[i].Load() < int64(lastSeq[i]) {
				return false
			}
		}
		return true
	}
	for !caughtUp() {
		if lctx.Err() != nil {
			return fmt.Errorf("warm-up: the listener and the streams did not get every event: %w", lctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := paced(total/tasks, true); err != nil {
		return err
	}
	if err := <-listenDone; err != nil {
		return err
	}
	if err := <-sseDone; err != nil {
		return err
	}
	r.EventReceiptMS = percentiles(receipts)
	r.SSEReceiptMS = percentiles(sseReceipts)
	r.EventWriteMS = percentiles(writes)
	r.note("event receipt: %d events at 1,000/s over %d tasks, written as the worker does (commit, then the process's Announcer notifies, coalesced); LISTEN: one connection; SSE: %d task streams through the gateway (one shared LISTEN hub)",
		len(receipts), tasks, tasks)
	return nil
}

// sseSubscribers serves the SSE gateway on loopback and follows one task
// stream per task from its seq in after, calling got for each event
// received. done yields once got has counted total events (or the first
// error).
func sseSubscribers(ctx context.Context, opts Options, db *database, tasks []uuid.UUID, after []int, total int,
	got func(task int, seq int, at time.Time) (counted bool)) (<-chan error, func(), error) {
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	verifier, err := auth.NewVerifier(hex.EncodeToString(secret), nil)
	if err != nil {
		return nil, nil, err
	}
	token, err := verifier.Sign(auth.Claims{Role: auth.RoleService,
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		return nil, nil, err
	}
	hctx, cancel := context.WithCancel(ctx)
	hub := sse.NewHub(db.pool, opts.Logger)
	go func() { _ = hub.Run(hctx) }()
	mux := http.NewServeMux()
	// One token follows every task: the caps of open streams are raised to that.
	api.New(db.pool, sse.NewStreams(db.pool, hub, sse.Config{Logger: opts.Logger}), api.Config{Verifier: verifier, Logger: opts.Logger,
		MaxStreams: len(tasks), MaxStreamsPerToken: len(tasks)}).Register(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return hctx }}
	go func() { _ = srv.Serve(ln) }()
	var count atomic.Int64
	done := make(chan error, 1)
	var once sync.Once
	finish := func(err error) { once.Do(func() { done <- err }) }
	client := &sse.Client{Token: token, HTTPClient: &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: len(tasks)}}}
	var wg sync.WaitGroup
	for i, id := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("http://%s/v1/tasks/%s/events", ln.Addr(), id)
			err := client.Follow(hctx, url, strconv.Itoa(after[i]), func(m sse.Message) error {
				if got(i, m.Event.Seq, time.Now()) && count.Add(1) == int64(total) {
					finish(nil)
				}
				return nil
			})
			if err != nil && hctx.Err() == nil {
				finish(fmt.Errorf("sse stream of task %s: %w", id, err))
			}
		}()
	}
	stop := func() {
		cancel()
		_ = srv.Close()
		wg.Wait()
		<-hub.Done()
	}
	return done, stop, nil
}
