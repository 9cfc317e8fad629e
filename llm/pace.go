package llm

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"
)

// Pacing constants. A key whose limit is unknown starts at startRPS and
// doubles its pace every slowStartInterval its calls had to queue (slow
// start) until the provider first refuses one; from then on it backs off
// on refusals and probes upward by probeStep a second while busy.
const (
	startRPS          = 10.0
	maxRPS            = 10000.0
	minRPS            = 1.0 / 60
	probeStep         = 0.05
	probeInterval     = time.Second
	slowStartInterval = 200 * time.Millisecond
	// A refusal asking for a wait this long means the provider is out of
	// capacity for a while: every call of the key waits, not just the
	// refused one.
	blockAfter = 2 * time.Second
	// syncInterval is how often a busy pacer reconciles with the other
	// replicas through its Sharer.
	syncInterval = time.Second
	// A refusal tells the others sooner: they may be overshooting too. So
	// does a new pacer, whose first syncs may find the others not there
	// yet.
	refusedSyncInterval = 100 * time.Millisecond
	startSyncPeriod     = 3 * time.Second
	syncTimeout         = 3 * time.Second
	// tokenBurst is how many seconds of the token pace one burst may use.
	tokenBurst = 6.0
)

// pacer paces the calls of one process to one endpoint and model: calls
// queue in arrival order and leave one every 1/rate seconds, the rate being
// this replica's share of what the provider allows. It learns that limit
// from x-ratelimit headers when the provider sends them and from refusals
// otherwise (slow start, then additive increase, multiplicative decrease).
type pacer struct {
	key            PaceKey
	capRPS, capTPS float64 // 0: none
	share          Sharer
	obs            RateObserver
	logger         *slog.Logger

	mu sync.Mutex
	// total is the estimated requests per second allowed for the key, all
	// replicas together; tps the tokens per second (0: unknown).
	total, tps float64
	learned    bool // total read from x-ratelimit headers
	slowStart  bool
	live       int // replicas sharing the key, this one included
	// weight is this replica's published demand (queued calls + 1) and
	// totalWeight all live replicas' (0: not shared yet).
	weight, totalWeight float64
	blocked             time.Time
	last                time.Time // the last departure, as scheduled
	tokens              float64   // token bucket of this replica
	tokensAt            time.Time
	queue               []*waiter
	running             bool // the dispatcher goroutine runs
	wake                chan struct{}
	// busy: a call queued since the last probe.
	busy         bool
	lastProbe    time.Time
	lastDecrease time.Time
	// wmax is the estimate before the last back-off: probing returns to
	// it quickly, and past it slowly.
	wmax float64
	// Answers counted over the current second, and the rate of the last
	// one: while the provider refuses, it answers about its limit.
	winStart     time.Time
	winCount     int
	answeredRate float64
	syncing      bool
	lastSync     time.Time
	lastRate     float64 // last rate reported to obs
	created      time.Time
}

type waiter struct {
	tokens    float64
	ready     chan struct{}
	cancelled bool
	departed  bool
}

func newPacer(key PaceKey, cfg RateLimitConfig, logger *slog.Logger) *pacer {
	p := &pacer{key: key, capRPS: cfg.MaxRPM / 60, capTPS: cfg.MaxTPM / 60, share: cfg.Share, obs: cfg.Observer,
		logger: logger, live: 1, wake: make(chan struct{}, 1), lastProbe: time.Now(), created: time.Now()}
	if p.capRPS > 0 {
		p.total = p.capRPS // the operator named the limit: no need to find it
	} else {
		p.total, p.slowStart = startRPS, true
	}
	p.tps = p.capTPS
	p.tokens, p.tokensAt = p.tokenBurstSize(), time.Now()
	return p
}

// rate is this replica's pace in requests per second.
func (p *pacer) rate() float64 {
	t := p.total
	if p.capRPS > 0 {
		t = min(t, p.capRPS)
	}
	return t * p.part()
}

// part is this replica's part of the key's limit: by the calls each live
// replica had queued at the last sync (and one more each, so an idle one
// still gets going), so that busy replicas are not held back by idle ones.
func (p *pacer) part() float64 {
	if p.totalWeight > 0 {
		return p.weight / p.totalWeight
	}
	return 1 / float64(max(p.live, 1))
}

// interval is the time between two departures at the current pace.
func (p *pacer) interval() time.Duration {
	return time.Duration(float64(time.Second) / p.rate())
}

// tokenRate is this replica's pace in tokens per second (0: unpaced).
func (p *pacer) tokenRate() float64 {
	return p.tps * p.part()
}

func (p *pacer) tokenBurstSize() float64 { return p.tokenRate() * tokenBurst }

// refill brings the token bucket to now.
func (p *pacer) refill(now time.Time) {
	if r := p.tokenRate(); r > 0 {
		p.tokens = min(p.tokens+now.Sub(p.tokensAt).Seconds()*r, p.tokenBurstSize())
	}
	p.tokensAt = now
}

// readyAt is when a call of n tokens may leave.
func (p *pacer) readyAt(now time.Time, n float64) time.Time {
	at := now
	if p.blocked.After(at) {
		at = p.blocked
	}
	if next := p.last.Add(p.interval()); next.After(at) {
		at = next
	}
	if r := p.tokenRate(); r > 0 {
		p.refill(now)
		need := min(n, p.tokenBurstSize())
		if p.tokens < need {
			if t := now.Add(time.Duration((need - p.tokens) / r * float64(time.Second))); t.After(at) {
				at = t
			}
		}
	}
	return at
}

// depart lets a call of n tokens leave now.
func (p *pacer) depart(now time.Time, n float64) {
	// Scheduled, not actual: a late wake-up is caught up with, by at most
	// one departure, so the pace holds without a burst after a pause.
	iv := p.interval()
	p.last = p.last.Add(iv)
	if floor := now.Add(-iv); p.last.Before(floor) {
		p.last = floor
	}
	if p.tokenRate() > 0 {
		p.refill(now)
		p.tokens -= min(n, p.tokenBurstSize())
	}
}

// estimate is how long a call queued now behind ahead others will wait.
func (p *pacer) estimate(now time.Time, ahead int, n float64) time.Duration {
	d := p.readyAt(now, n).Sub(now) + time.Duration(float64(ahead)/p.rate()*float64(time.Second))
	if r := p.tokenRate(); r > 0 && ahead > 0 {
		d = max(d, time.Duration(float64(ahead)*n/r*float64(time.Second)))
	}
	return max(d, 0)
}

// acquire waits until the call may go to the provider. It fails with
// ctx's error, or errWaitTooLong when the wait would pass the call's
// MaxWait.
func (p *pacer) acquire(ctx context.Context, cs *callState) error {
	now := time.Now()
	p.mu.Lock()
	p.maybeSync(now)
	p.probe(now)
	if len(p.queue) == 0 && !p.readyAt(now, cs.tokens).After(now) {
		p.depart(now, cs.tokens)
		p.mu.Unlock()
		return nil
	}
	p.busy = true
	est := p.estimate(now, len(p.queue), cs.tokens)
	left := cs.maxWait - cs.waited
	if p.blocked.Sub(now) > left {
		p.mu.Unlock()
		return errWaitTooLong
	}
	w := &waiter{tokens: cs.tokens, ready: make(chan struct{})}
	p.queue = append(p.queue, w)
	if !p.running {
		p.running = true
		go p.dispatch()
	}
	p.mu.Unlock()

	cs.notify(min(est, left))
	timer := time.NewTimer(left)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = errWaitTooLong
	}
	if err != nil {
		p.mu.Lock()
		if w.departed {
			err = nil // it left as the wait ended: go
		} else {
			w.cancelled = true
		}
		p.mu.Unlock()
	}
	waited := time.Since(now)
	cs.waited += waited
	p.waited(waited)
	return err
}

// dispatch lets queued calls leave at the pace, and returns once the queue
// is empty.
func (p *pacer) dispatch() {
	for {
		p.mu.Lock()
		for len(p.queue) > 0 && p.queue[0].cancelled {
			p.queue = p.queue[1:]
		}
		if len(p.queue) == 0 {
			p.queue, p.running = nil, false
			p.mu.Unlock()
			return
		}
		now := time.Now()
		p.probe(now)
		p.maybeSync(now)
		w := p.queue[0]
		at := p.readyAt(now, w.tokens)
		if !at.After(now) {
			p.depart(now, w.tokens)
			p.queue = p.queue[1:]
			w.departed = true
			close(w.ready)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		// A pace change (a refusal, a sync) may move the departure: wake
		// for it, and at least every slow-start interval to probe.
		timer := time.NewTimer(min(at.Sub(now), slowStartInterval))
		select {
		case <-timer.C:
		case <-p.wake:
		}
		timer.Stop()
	}
}

// signal wakes the dispatcher to recompute its next departure.
func (p *pacer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// probe raises an estimated pace that kept calls queued for a probe
// interval without a refusal: doubling it in slow start, by probeStep
// after. A pace read from the provider's headers is not probed.
func (p *pacer) probe(now time.Time) {
	interval := probeInterval
	if p.slowStart {
		interval = slowStartInterval
	}
	if now.Sub(p.lastProbe) < interval {
		return
	}
	busy := p.busy || len(p.queue) > 0
	p.busy, p.lastProbe = false, now
	if !busy || p.learned || now.Sub(p.lastDecrease) < probeInterval {
		return
	}
	if p.capRPS > 0 && p.total >= p.capRPS {
		return
	}
	if p.slowStart {
		p.total = min(p.total*2, maxRPS)
	} else {
		p.total = min(p.total+max(p.total*probeStep, (p.wmax-p.total)/2), maxRPS)
	}
	if p.capRPS > 0 {
		p.total = min(p.total, p.capRPS)
	}
	p.paced()
}

// paced tells the observer this replica's pace, when it changed.
func (p *pacer) paced() {
	r := p.rate()
	if p.obs != nil && r != p.lastRate {
		p.obs.RatePaced(p.key, r)
	}
	p.lastRate = r
}

// answered learns from the headers of an answer that was not a refusal.
func (p *pacer) answered(h http.Header) {
	now := time.Now()
	l := readLimits(h, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roll(now)
	p.winCount++
	p.learn(now, l)
}

// roll starts a new second of counting answers when the last is over.
func (p *pacer) roll(now time.Time) {
	if d := now.Sub(p.winStart); d >= time.Second {
		p.answeredRate = float64(p.winCount) / d.Seconds()
		p.winStart, p.winCount = now, 0
	}
}

// learn takes what the x-ratelimit headers said.
func (p *pacer) learn(now time.Time, l limits) {
	changed := false
	if l.rpm > 0 && (p.total != l.rpm/60 || !p.learned) {
		p.total, p.learned, p.slowStart, changed = l.rpm/60, true, false, true
	}
	if l.tpm > 0 {
		tps := l.tpm / 60
		if p.capTPS > 0 {
			tps = min(tps, p.capTPS)
		}
		if tps != p.tps {
			p.tps, changed = tps, true
		}
	}
	if l.exhausted {
		if until := now.Add(l.until); until.After(p.blocked) {
			p.blocked, changed = until, true
		}
	}
	if changed {
		p.paced()
		p.signal()
	}
}

// refused learns from a refusal (429, or 503 with Retry-After) asking for
// wait, of a call that left at departed. Only a call that left after the
// last back-off backs off again: the calls already under way when the
// pace went down say nothing of the new pace.
func (p *pacer) refused(h http.Header, wait time.Duration, departed time.Time) {
	if p.obs != nil {
		p.obs.RateRefused(p.key)
	}
	now := time.Now()
	l := readLimits(h, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.learn(now, l)
	if !p.learned && departed.After(p.lastDecrease) {
		factor := 0.7
		if p.slowStart {
			factor = 0.5 // the pace doubled past the limit within the last second
		}
		p.wmax = p.total
		if p.slowStart {
			p.wmax = p.total / 2 // the last pace that was not refused
		}
		// Not below what the provider answered in the last second, all
		// replicas alike: refusing, it answers about its limit.
		p.roll(now)
		floor := min(p.answeredRate*float64(p.live)*0.9, p.total)
		p.total = max(p.total*factor, floor, minRPS)
		p.slowStart, p.lastDecrease = false, now
		p.paced()
	}
	p.syncAfter(now, refusedSyncInterval)
	if wait >= blockAfter {
		if until := now.Add(wait); until.After(p.blocked) {
			p.blocked = until
		}
	}
	p.signal()
}

// waited reports a call's wait to the observer.
func (p *pacer) waited(d time.Duration) {
	if p.obs != nil && d > 0 {
		p.obs.RateWaited(p.key, d)
	}
}

// charge corrects the token bucket once a call's real usage is known.
func (p *pacer) charge(estimated, used float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tokenRate() > 0 {
		p.refill(time.Now())
		p.tokens -= used - min(estimated, p.tokenBurstSize())
	}
}

// maybeSync starts a reconciliation with the other replicas when one is
// due. Called with p.mu held.
func (p *pacer) maybeSync(now time.Time) {
	if now.Sub(p.created) < startSyncPeriod {
		p.syncAfter(now, refusedSyncInterval)
		return
	}
	p.syncAfter(now, syncInterval)
}

// syncAfter starts a reconciliation unless one ran within interval.
func (p *pacer) syncAfter(now time.Time, interval time.Duration) {
	if p.share == nil || p.syncing || now.Sub(p.lastSync) < interval {
		return
	}
	p.syncing, p.lastSync = true, now
	mine := PaceState{RPS: p.total, TPS: p.tps, Learned: p.learned, Probing: p.slowStart, BlockedUntil: p.blocked,
		Demand: float64(len(p.queue) + 1)}
	go p.sync(mine)
}

// sync publishes this replica's view and takes the one the live replicas
// agree on. A failure keeps the local view: pacing goes on, unshared.
func (p *pacer) sync(mine PaceState) {
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	agreed, live, err := p.share.Share(ctx, p.key, mine)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncing = false
	if err != nil {
		p.logger.Warn("share the provider's rate limit with other replicas", slog.String("endpoint", p.key.Endpoint),
			slog.String("model", p.key.Model), slog.String("err", err.Error()))
		return
	}
	p.live = max(live, 1)
	if agreed.Demand >= mine.Demand {
		p.weight, p.totalWeight = mine.Demand, agreed.Demand
	}
	if agreed.RPS > 0 && !math.IsInf(agreed.RPS, 0) && (agreed.Learned || !p.learned) {
		if !agreed.Probing && !agreed.Learned && agreed.RPS < p.total {
			// Another replica backed off: so does this one, once, and
			// its calls already under way say nothing of the new pace.
			p.wmax, p.lastDecrease = max(p.wmax, agreed.RPS/0.7), time.Now()
		}
		p.slowStart = p.slowStart && agreed.Probing
		p.total, p.learned = agreed.RPS, agreed.Learned
	}
	if agreed.TPS > 0 {
		p.tps = agreed.TPS
		if p.capTPS > 0 {
			p.tps = min(p.tps, p.capTPS)
		}
	}
	if agreed.BlockedUntil.After(p.blocked) {
		p.blocked = agreed.BlockedUntil
	}
	p.paced()
	p.signal()
}
