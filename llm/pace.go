package llm

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/agentworker/agentworker/tracing"
)

// Pacing constants. A key whose limit is unknown is not paced until the
// provider first refuses one of its calls; from then on the pacer backs
// off on refusals the pace explains and probes upward by probeStep a
// second while busy.
const (
	maxRPS        = 10000.0
	minRPS        = 1.0 / 60
	probeStep     = 0.05
	probeInterval = time.Second
	// firstRPS is the least pace the first refusal backs off to: a
	// burst's first refusal may come before most of its answers.
	firstRPS = 10.0
	// A back-off is on trial until trialCalls calls that left after it
	// have an outcome: when they are refused about as often as the calls
	// before it, the refusals are not the pace's doing (a provider that
	// refuses at random) and the back-off is undone.
	trialCalls = 20
	// noiseMargin is how much more often than the refusals no pace
	// explains calls must be refused for a back-off; noiseHalfLife is how
	// soon that level is forgotten once refusals stop bearing it out.
	noiseMargin   = 0.15
	noiseHalfLife = 30 * time.Second
	// outcomeWindow is the span of the recent answers and refusals a
	// back-off reads, in outcomeBuckets buckets.
	outcomeWindow  = time.Second
	outcomeBuckets = 10
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
// otherwise (additive increase, multiplicative decrease); until either
// says anything, calls are not paced.
type pacer struct {
	key            PaceKey
	capRPS, capTPS float64 // 0: none
	share          Sharer
	obs            RateObserver
	logger         *slog.Logger

	mu sync.Mutex
	// total is the estimated requests per second allowed for the key, all
	// replicas together (+Inf: unpaced); tps the tokens per second (0:
	// unknown).
	total, tps float64
	learned    bool // total read from x-ratelimit headers
	// refusedOnce: a refusal or another replica's estimate has been
	// seen; until then an unpaced key publishes no estimate.
	refusedOnce bool
	live        int // replicas sharing the key, this one included
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
	busy      bool
	lastProbe time.Time
	// lastDecrease and prevDecrease start the current and the previous
	// epoch: the calls that left since the last back-off, and those that
	// left between the two before. cur and prev count their outcomes.
	lastDecrease, prevDecrease time.Time
	cur, prev                  outcomes
	// trial: the last back-off awaits trialCalls outcomes of the current
	// epoch; undo is the pace before it.
	trial bool
	undo  float64
	// noise is the share of calls refused whatever the pace, as of
	// noiseAt.
	noise   float64
	noiseAt time.Time
	// wmax is the finite estimate before the last back-off: probing
	// returns to it quickly, and past it slowly (0: none).
	wmax float64
	// recent counts answers and refusals over the last outcomeWindow.
	recent   [outcomeBuckets]outcomes
	recentAt time.Time // start of the newest bucket
	syncing  bool
	lastSync time.Time
	lastRate float64 // last rate reported to obs
	created  time.Time
}

// outcomes counts answered and refused calls.
type outcomes struct{ answered, refused int }

func (o outcomes) n() int { return o.answered + o.refused }

// refusedShare is the share of o refused (0 when empty).
func (o outcomes) refusedShare() float64 {
	if o.n() == 0 {
		return 0
	}
	return float64(o.refused) / float64(o.n())
}

type waiter struct {
	tokens    float64
	at        time.Time // when it left
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
		p.total = math.Inf(1)
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
		cs.departed = now
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
	_, span := tracing.Start(ctx, "rate_limit_wait")
	span.SetString("agentworker.rate_limit.reason", "pace")
	timer := time.NewTimer(left)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		cs.departed = w.at // written before ready was closed
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = errWaitTooLong
	}
	span.End(err)
	if err != nil {
		p.mu.Lock()
		if w.departed {
			err = nil // it left as the wait ended: go
			cs.departed = w.at
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
			w.departed, w.at = true, now
			close(w.ready)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		// A pace change (a refusal, a sync) may move the departure: wake
		// for it, and at least every fifth of a probe interval to probe.
		timer := time.NewTimer(min(at.Sub(now), probeInterval/5))
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
// interval without a back-off: quickly back towards the estimate before
// the last back-off, by probeStep past it. Each replica raises the key's
// estimate by its part of the step, so that several replicas probe no
// faster than one. A pace read from the provider's headers, and no pace,
// are not probed.
func (p *pacer) probe(now time.Time) {
	if now.Sub(p.lastProbe) < probeInterval {
		return
	}
	busy := p.busy || len(p.queue) > 0
	p.busy, p.lastProbe = false, now
	if !busy || p.learned || math.IsInf(p.total, 1) || now.Sub(p.lastDecrease) < probeInterval {
		return
	}
	if p.capRPS > 0 && p.total >= p.capRPS {
		return
	}
	step := max(p.total*probeStep, (p.wmax-p.total)/2) * p.part()
	p.total = min(p.total+step, maxRPS)
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

// answered learns from the headers of an answer that was not a refusal,
// to a call that left at departed.
func (p *pacer) answered(h http.Header, departed time.Time) {
	now := time.Now()
	l := readLimits(h, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count(now, departed, false)
	p.learn(now, l)
	p.judge(now)
}

// roll moves the recent outcomes' buckets to now.
func (p *pacer) roll(now time.Time) {
	width := outcomeWindow / outcomeBuckets
	if p.recentAt.IsZero() {
		p.recentAt = now
	}
	for n := 0; now.Sub(p.recentAt) >= width; n++ {
		if n == outcomeBuckets {
			p.recent, p.recentAt = [outcomeBuckets]outcomes{}, now
			break
		}
		copy(p.recent[1:], p.recent[:outcomeBuckets-1])
		p.recent[0] = outcomes{}
		p.recentAt = p.recentAt.Add(width)
	}
}

// recentOutcomes sums the outcomes of the last outcomeWindow.
func (p *pacer) recentOutcomes(now time.Time) outcomes {
	p.roll(now)
	var o outcomes
	for _, b := range p.recent {
		o.answered += b.answered
		o.refused += b.refused
	}
	return o
}

// count records the outcome of a call that left at departed, in the
// recent window and in its epoch.
func (p *pacer) count(now, departed time.Time, refused bool) {
	p.roll(now)
	add := func(o *outcomes) {
		if refused {
			o.refused++
		} else {
			o.answered++
		}
	}
	add(&p.recent[0])
	switch {
	case !departed.Before(p.lastDecrease):
		add(&p.cur)
	case !departed.Before(p.prevDecrease):
		add(&p.prev)
	}
}

// newEpoch starts an epoch at now: the calls leaving from now on are
// counted apart from those before.
func (p *pacer) newEpoch(now time.Time) {
	p.prevDecrease, p.lastDecrease = p.lastDecrease, now
	p.prev, p.cur = p.cur, outcomes{}
}

// learn takes what the x-ratelimit headers said.
func (p *pacer) learn(now time.Time, l limits) {
	changed := false
	if l.rpm > 0 && (p.total != l.rpm/60 || !p.learned) {
		p.total, p.learned, p.trial, changed = l.rpm/60, true, false, true
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

// noiseLevel is the share of calls refused whatever the pace, as known
// now: it halves every noiseHalfLife since it was last borne out.
func (p *pacer) noiseLevel(now time.Time) float64 {
	if p.noise == 0 {
		return 0
	}
	return p.noise * math.Exp2(-now.Sub(p.noiseAt).Seconds()/noiseHalfLife.Seconds())
}

// refused learns from a refusal (429, or 503 with Retry-After) asking for
// wait, of a call that left at departed. The refused call waits as asked
// in any case; the pace backs off only when the refusal may be its doing:
// the call left after the last back-off, that back-off is not on trial,
// and calls are refused more often than the provider refuses whatever the
// pace.
func (p *pacer) refused(h http.Header, wait time.Duration, departed time.Time) {
	if p.obs != nil {
		p.obs.RateRefused(p.key)
	}
	now := time.Now()
	l := readLimits(h, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count(now, departed, true)
	p.learn(now, l)
	if !p.learned && !departed.Before(p.lastDecrease) && !p.trial && p.beyondNoise(now) {
		p.backOff(now)
	}
	p.judge(now)
	p.syncAfter(now, refusedSyncInterval)
	if wait >= blockAfter {
		if until := now.Add(wait); until.After(p.blocked) {
			p.blocked = until
		}
	}
	p.signal()
}

// beyondNoise reports whether the recent refusals are more than the
// provider makes whatever the pace; while it makes none, any refusal is.
// Recent refusals within the level bear it out.
func (p *pacer) beyondNoise(now time.Time) bool {
	noise := p.noiseLevel(now)
	if noise == 0 {
		return true
	}
	r := p.recentOutcomes(now)
	if r.n() < trialCalls {
		return false
	}
	if share := r.refusedShare(); share <= noise+noiseMargin {
		p.noise, p.noiseAt = max(noise, share), now
		return false
	}
	return true
}

// backOff lowers the pace after a refusal and puts the back-off on trial.
// The first refusal of an unpaced key goes to what the provider answered
// this replica in the last second, scaled to all replicas by this one's
// part (refusing, the provider answers about its limit); a paced key goes
// down by 0.7, not below that.
func (p *pacer) backOff(now time.Time) {
	answered := float64(p.recentOutcomes(now).answered) / outcomeWindow.Seconds() / p.part()
	p.undo = p.total
	if math.IsInf(p.total, 1) {
		p.total, p.wmax = max(answered, firstRPS), 0
	} else {
		p.wmax = p.total
		p.total = max(p.total*0.7, min(answered*0.9, p.total), minRPS)
	}
	p.refusedOnce, p.trial = true, true
	p.newEpoch(now)
	p.paced()
}

// judge ends the trial of the last back-off once enough calls that left
// after it have an outcome. A pace past the limit is refused less after a
// back-off (or, still past it, more often as the provider's burst is
// spent); a provider refusing at random refuses as often. When the share
// refused stayed about the same, the back-off is undone (back to the pace
// before the first of a row of them) and that share is taken as the
// provider's refusals whatever the pace. When too few calls left before
// the back-off to compare with and the calls after it are still refused,
// the pace backs off once more and the two paces are compared. A replica
// sharing the key with others cannot tell: their calls, not its own pace,
// may be what the provider refuses; its back-offs stand.
func (p *pacer) judge(now time.Time) {
	if !p.trial || p.cur.n() < trialCalls {
		return
	}
	if p.live > 1 {
		p.trial = false
		return
	}
	pre, post := p.prev.refusedShare(), p.cur.refusedShare()
	if p.prev.n() < trialCalls && p.cur.refused >= 2 {
		p.wmax = p.total
		p.total = max(p.total*0.7, minRPS)
		p.newEpoch(now)
		p.paced()
		return
	}
	p.trial = false
	same := post >= pre*0.6 && post <= pre*1.25+0.05
	if p.prev.n() < trialCalls || p.prev.refused < 2 || p.cur.refused < 2 || !same {
		return
	}
	p.noise, p.noiseAt = post, now
	if p.undo > p.total {
		p.total = p.undo
		if !math.IsInf(p.total, 1) {
			p.wmax = 0
		}
		p.logger.Debug("provider refusals are not the pace's doing: back-off undone", slog.String("endpoint", p.key.Endpoint),
			slog.String("model", p.key.Model), slog.Float64("refused_share", post), slog.Float64("rps", p.total))
	}
	p.paced()
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

// published is the estimate this replica shares: none (0) while it has
// neither read the limit nor met a refusal, +Inf once refusals were found
// not to be the pace's doing.
func (p *pacer) published() float64 {
	if !p.learned && !p.refusedOnce {
		return 0
	}
	return p.total
}

// syncAfter starts a reconciliation unless one ran within interval.
func (p *pacer) syncAfter(now time.Time, interval time.Duration) {
	if p.share == nil || p.syncing || now.Sub(p.lastSync) < interval {
		return
	}
	p.syncing, p.lastSync = true, now
	mine := PaceState{RPS: p.published(), TPS: p.tps, Learned: p.learned, BlockedUntil: p.blocked,
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
	// An estimate another replica made (or +Inf: it found the refusals
	// not the pace's doing) is taken unless this one read the limit; one
	// on trial here is not replaced before its verdict.
	if agreed.RPS > 0 && !agreed.Probing && (agreed.Learned || (!p.learned && !p.trial)) && agreed.RPS != p.total {
		if !agreed.Learned && agreed.RPS < p.total {
			// Another replica backed off: so does this one, once, and
			// its calls already under way say nothing of the new pace.
			if !math.IsInf(p.total, 1) {
				p.wmax = max(p.wmax, p.total)
			}
			p.newEpoch(time.Now())
		}
		p.total, p.learned, p.refusedOnce = agreed.RPS, agreed.Learned, true
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
