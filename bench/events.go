package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

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
	db, err := newDatabase(ctx, opts.AdminURL, 120)
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
	payload := []agentsql.NewEvent{{Type: "log", Payload: []byte(`{"level":"info","message":"bench event"}`)}}

	// Write rate: 8 writers, one event per statement, as fast as they go.
	var written atomic.Int64
	wctx, cancel := context.WithTimeout(ctx, dur/2)
	g, gctx := errgroup.WithContext(wctx)
	for w := range 8 {
		g.Go(func() error {
			for i := w; gctx.Err() == nil; i += 8 {
				if _, err := agentsql.InsertEvents(gctx, db.pool, ids[i%tasks], projects[i%tasks], payload); err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
				written.Add(1)
			}
			return nil
		})
	}
	err = g.Wait()
	cancel()
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
	var mu sync.Mutex
	sent := map[key]time.Time{}
	var receipts []time.Duration

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
	listenDone := make(chan error, 1)
	go func() {
		got := 0
		for got < total {
			n, err := conn.Conn().WaitForNotification(lctx)
			if err != nil {
				listenDone <- fmt.Errorf("listener got %d of %d notifications: %w", got, total, err)
				return
			}
			at := time.Now()
			var k struct {
				TaskID uuid.UUID `json:"task_id"`
				Seq    int       `json:"seq"`
			}
			if json.Unmarshal([]byte(n.Payload), &k) != nil {
				continue
			}
			mu.Lock()
			if t0, ok := sent[key{k.TaskID, k.Seq}]; ok {
				receipts = append(receipts, at.Sub(t0))
				got++
			}
			mu.Unlock()
		}
		listenDone <- nil
	}()

	g, gctx = errgroup.WithContext(ctx)
	start := time.Now()
	perTask := total / tasks
	for i := range ids {
		g.Go(func() error {
			offset := time.Duration(i) * time.Second / 10 / tasks
			for k := range perTask {
				due := start.Add(offset + time.Duration(k)*100*time.Millisecond)
				time.Sleep(time.Until(due)) // pacing the writers, not waiting for a result
				seq := lastSeq[i] + k + 1
				mu.Lock()
				sent[key{ids[i], seq}] = time.Now()
				mu.Unlock()
				if _, err := agentsql.InsertEvents(gctx, db.pool, ids[i], projects[i], payload); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("paced writers: %w", err)
	}
	if err := <-listenDone; err != nil {
		return err
	}
	r.EventReceiptMS = percentiles(receipts)
	r.note("event receipt: %d events at 1,000/s over %d tasks, one LISTEN connection", len(receipts), tasks)
	return nil
}
