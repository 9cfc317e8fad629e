package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/agentworker/agentworker/internal/devenv/proccpu"
)

// Steady is event receipt at a steady load: build tasks arrive at a
// constant rate and live on their model long enough that about a thousand
// are in flight while they write over a thousand events a second. The
// in-flight scenario's tasks all start and answer together, so there the
// receipt is measured while each burst holds the machine's CPUs; here it
// is measured at the load itself.
type Steady struct {
	ArrivalsPerS float64 `json:"arrivals_per_s"`
	ModelDelayMS float64 `json:"model_delay_ms"`
	// WindowS is the time measured, after the tasks in flight have grown to
	// their steady number and while tasks still arrive.
	WindowS float64 `json:"window_s"`
	// Tasks in flight (inserted, not done), sampled every 100 ms.
	InFlightMedian int `json:"in_flight_median"`
	InFlightMin    int `json:"in_flight_min"`
	// EventsPerS is the rate the window's events were written at.
	EventsPerS float64 `json:"events_per_s"`
	// CPUBusy is the share of the machine's CPUs busy over the window.
	CPUBusy float64 `json:"cpu_busy"`
	// EventReceiptMS is as the in-flight scenario's, for the events written
	// in the window.
	EventReceiptMS Percentiles `json:"event_receipt_ms"`
}

func runSteady(ctx context.Context, opts Options, r *Report) error {
	// A task lives 2 × delay and writes about 33 events: at 40 arrivals a
	// second, 1,000 tasks are in flight, writing some 1,300 events a second.
	rate, delay, window := 40.0, 12500*time.Millisecond, 20*time.Second
	if opts.Quick {
		rate, delay, window = 50, 100*time.Millisecond, time.Second
	}
	life := 2 * delay
	expected := int(rate * life.Seconds())
	o := opts
	o.Concurrency = expected * 5 / 4 // room for the number in flight to wander above its mean
	db, err := newWorkerDatabase(ctx, opts.AdminURL, o.Concurrency, nil)
	if err != nil {
		return err
	}
	defer db.drop()
	p, err := startWarm(ctx, o, db, fixedDelayModel(delay))
	if err != nil {
		return err
	}
	defer p.stop(ctx)

	sctx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	receipts := listenReceipts(sctx, db)
	var done atomic.Int64
	go func() {
		for {
			select {
			case <-p.timed.done:
				done.Add(1)
			case <-sctx.Done():
				return
			}
		}
	}()

	// Arrivals at rate, in one statement per 25 ms tick, until the window
	// (after one task life of growth) ends.
	t0 := time.Now()
	start, end := t0.Add(life+delay/2), t0.Add(life+delay/2+window)
	var (
		inserted  int64
		inFlight  []int
		busy0     float64
		total0    float64
		haveStart bool
	)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	lastSample := t0
	for now := t0; now.Before(end); now = time.Now() {
		if due := int64(now.Sub(t0).Seconds() * rate); due > inserted {
			if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
				SELECT gen_random_uuid(), 'build', 'steady' FROM generate_series(1, $1)`, due-inserted); err != nil {
				return fmt.Errorf("insert %d steady tasks: %w", due-inserted, err)
			}
			inserted = due
		}
		if !now.Before(start) {
			if !haveStart {
				busy0, total0, _ = proccpu.Machine()
				haveStart = true
			}
			if now.Sub(lastSample) >= 100*time.Millisecond {
				inFlight = append(inFlight, int(inserted-done.Load()))
				lastSample = now
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	busy1, total1, _ := proccpu.Machine()
	windowEnd := time.Now()
	for deadline := time.Now().Add(life + time.Minute); done.Load() < inserted; {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d steady tasks done", done.Load(), inserted)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stopListening()
	rc := <-receipts

	var lat []time.Duration
	for i, c := range rc.created {
		if !c.Before(start) && c.Before(windowEnd) {
			lat = append(lat, rc.lat[i])
		}
	}
	var written int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM agent_events WHERE created_at >= $1 AND created_at < $2`,
		start, windowEnd).Scan(&written); err != nil {
		return fmt.Errorf("count the window's events: %w", err)
	}
	var ok int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM ai_tasks WHERE status = 'succeeded' AND prompt = 'steady'").Scan(&ok); err != nil {
		return err
	}
	if int64(ok) != inserted {
		return fmt.Errorf("%d of %d steady tasks succeeded", ok, inserted)
	}
	if len(inFlight) == 0 || len(lat) == 0 {
		return fmt.Errorf("steady: nothing measured in the window (%d samples, %d receipts)", len(inFlight), len(lat))
	}
	slices.Sort(inFlight)
	s := &r.Steady
	s.ArrivalsPerS, s.ModelDelayMS = rate, float64(delay.Milliseconds())
	s.WindowS = windowEnd.Sub(start).Seconds()
	s.InFlightMedian, s.InFlightMin = inFlight[len(inFlight)/2], inFlight[0]
	s.EventsPerS = float64(written) / s.WindowS
	s.CPUBusy = ratio(busy1-busy0, total1-total0)
	s.EventReceiptMS = percentiles(lat)
	r.note("steady: build tasks inserted at %.0f/s (2 model calls of %s each), measured over %.0f s once about %d were in flight; the machine's CPU busy share is over that window",
		rate, delay, s.WindowS, expected)
	return nil
}
