package sse_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
)

const benchTasks = 100

// BenchmarkWrite measures how many events per second the Recorder writes,
// from 16 goroutines over 100 tasks.
func BenchmarkWrite(b *testing.B) {
	e := setup(b, envOpts{})
	projectID := uuid.New()
	recs := make([]*events.Recorder, benchTasks)
	for i := range recs {
		recs[i] = events.NewRecorder(e.pool, e.newTask(b, projectID), projectID)
	}
	var n atomic.Int64
	b.SetParallelism(8)
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := recs[i%benchTasks].Emit(context.Background(), events.Log{Level: "info", Message: "bench"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "events/s")
}

// BenchmarkLatency writes 1,000 events per second across 100 tasks and
// measures write → LISTEN receipt, write → SSE receipt on 100 task streams,
// and write → SSE receipt on one project stream. Each iteration is one
// event; run with -benchtime=3000x for three seconds of load.
func BenchmarkLatency(b *testing.B) {
	e := setup(b, envOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	projectID := uuid.New()
	tasks := make([]uuid.UUID, benchTasks)
	recs := make([]*events.Recorder, benchTasks)
	for i := range tasks {
		tasks[i] = e.newTask(b, projectID)
		recs[i] = events.NewRecorder(e.pool, tasks[i], projectID)
	}

	var started sync.Map // event message (sequence number) → write start
	type lat struct {
		mu sync.Mutex
		d  []time.Duration
	}
	var listenLat, taskLat, projLat lat
	record := func(l *lat, msg string) {
		if t, ok := started.Load(msg); ok {
			d := time.Since(t.(time.Time))
			l.mu.Lock()
			l.d = append(l.d, d)
			l.mu.Unlock()
		}
	}

	// A raw LISTEN subscriber; the notification key has no content, so it
	// reads the message by id from a map filled after the insert.
	listener, err := pgx.Connect(ctx, e.pool.Config().ConnConfig.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN agent_events"); err != nil {
		b.Fatal(err)
	}
	var idToMsg sync.Map
	type notified struct {
		id int64
		at time.Time
	}
	var listenAt []notified
	var listenWG sync.WaitGroup
	listenWG.Go(func() {
		for {
			n, err := listener.WaitForNotification(ctx)
			if err != nil {
				return
			}
			var key struct {
				ID int64 `json:"id"`
			}
			_ = json.Unmarshal([]byte(n.Payload), &key)
			// The id → message map may not be filled yet: match afterwards.
			listenAt = append(listenAt, notified{key.ID, time.Now()})
		}
	})

	// 100 task streams and one project stream.
	client := &sse.Client{}
	var streams sync.WaitGroup
	var received atomic.Int64
	follow := func(url string, l *lat) {
		streams.Go(func() {
			_ = client.Follow(ctx, url, "", func(m sse.Message) error {
				var p events.Log
				_ = json.Unmarshal(m.Event.Payload, &p)
				record(l, p.Message)
				received.Add(1)
				return nil
			})
		})
	}
	for _, id := range tasks {
		follow(e.taskURL(id), &taskLat)
	}
	follow(e.projectURL(projectID), &projLat)

	// Paced writers: event i is due at start + i ms.
	jobs := make(chan int, 1024)
	var writers sync.WaitGroup
	for range 16 {
		writers.Go(func() {
			for i := range jobs {
				msg := "m" + strconv.Itoa(i)
				started.Store(msg, time.Now())
				evs, err := recs[i%benchTasks].Emit(context.Background(), events.Log{Level: "info", Message: msg})
				if err != nil {
					b.Error(err)
					continue
				}
				idToMsg.Store(evs[0].ID, msg)
			}
		})
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
			time.Sleep(d) // pacing to 1,000 events/s, not waiting for a result
		}
		jobs <- i
	}
	close(jobs)
	writers.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	// Each event reaches its task stream and the project stream.
	deadline := time.Now().Add(30 * time.Second)
	for received.Load() < int64(2*b.N) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	streams.Wait()
	listenWG.Wait()

	for _, n := range listenAt {
		if m, ok := idToMsg.Load(n.id); ok {
			if t, ok := started.Load(m); ok {
				listenLat.d = append(listenLat.d, n.at.Sub(t.(time.Time)))
			}
		}
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	for _, m := range []struct {
		name string
		l    *lat
	}{{"listen", &listenLat}, {"sse_task", &taskLat}, {"sse_project", &projLat}} {
		p50, p99 := percentiles(m.l.d)
		b.ReportMetric(p50, m.name+"_p50_ms")
		b.ReportMetric(p99, m.name+"_p99_ms")
		if len(m.l.d) < b.N*9/10 {
			b.Errorf("%s: %d of %d events measured", m.name, len(m.l.d), b.N)
		}
	}
}

func percentiles(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	return ms(d[len(d)*50/100]), ms(d[min(len(d)-1, len(d)*99/100)])
}
