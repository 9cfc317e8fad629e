package llm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentworker/agentworker/tracing"
)

// DefaultRateLimitMaxWait is how long one call waits, in all, for the
// provider's rate limit before it gives up with a [*RateLimitError].
const DefaultRateLimitMaxWait = 30 * time.Minute

// waitNotice is the shortest wait reported to Request.OnRateLimitWait: a
// paced call waits a few milliseconds all the time, which is not news.
const waitNotice = time.Second

// RateLimitConfig configures how a [Client] paces its calls to what the
// provider allows. The zero value learns the pace from the provider.
type RateLimitConfig struct {
	// MaxWait bounds the time one call spends waiting for the provider's
	// rate limit (its pace, Retry-After, x-ratelimit-reset-*); past it the
	// call fails with a [*RateLimitError]. Defaults to 30 minutes.
	MaxWait time.Duration
	// MaxRPM caps the requests per minute to the endpoint and model, all
	// replicas together. 0: no cap beyond what the provider says.
	MaxRPM float64
	// MaxTPM caps the tokens per minute (prompt and answer) to the endpoint
	// and model, all replicas together. 0: no cap beyond what the provider
	// says.
	MaxTPM float64
	// Share, when set, shares each endpoint and model's pace with the other
	// replicas calling it, so that together they stay within its limit.
	// Without it the process paces as if it were alone.
	Share Sharer
	// Observer, when set, is told of refusals, waits and pace changes.
	Observer RateObserver
}

// RateLimitError is returned when a call would have to wait longer than
// RateLimitConfig.MaxWait for the provider to accept it: the provider is
// busy, and the call may succeed later. It is transient ([IsTransient]).
type RateLimitError struct {
	// Endpoint and Model name the limit that was hit.
	Endpoint, Model string
	// Waited is how long the call had waited already.
	Waited time.Duration
	// RetryAfter is the wait the provider asked for last (0 when unknown).
	RetryAfter time.Duration
	// Refusals counts the call's requests the provider refused.
	Refusals int
	// Err is the provider's last refusal, an [*APIError] (nil when the call
	// waited for the pace alone).
	Err error
}

// Unwrap returns the provider's last refusal.
func (e *RateLimitError) Unwrap() error { return e.Err }

func (e *RateLimitError) Error() string {
	msg := fmt.Sprintf("provider busy: rate limit of %s model %q still in force after waiting %s (%d refused requests)",
		e.Endpoint, e.Model, e.Waited.Round(time.Second), e.Refusals)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; it asked for %s more", e.RetryAfter.Round(time.Second))
	}
	return msg
}

// PaceKey names one limit: an endpoint (host and path, no credentials) and
// a model.
type PaceKey struct {
	Endpoint string
	Model    string
}

// PaceState is a view of a key's limit.
type PaceState struct {
	// RPS is the requests per second the provider allows for the key, all
	// replicas together (0: unknown).
	RPS float64
	// TPS is the tokens per second it allows (0: unknown).
	TPS float64
	// Learned is true when RPS was read from the provider's x-ratelimit
	// headers rather than estimated from refusals.
	Learned bool
	// Probing is true while RPS is still being raised from a cautious start
	// (no refusal seen yet): a replica that knows better need not take it.
	Probing bool
	// BlockedUntil is when the provider said it accepts calls again.
	BlockedUntil time.Time
	// Demand is a replica's weight in the share: its queued calls and one.
	// Agreed, it is the live replicas' sum.
	Demand float64
}

// Sharer shares a key's pace among the replicas calling it.
type Sharer interface {
	// Share publishes this replica's view of key, keeps it alive for a
	// lease, and returns the view all live replicas agree on and how many
	// replicas (this one included) share the key now.
	Share(ctx context.Context, key PaceKey, mine PaceState) (PaceState, int, error)
}

// RateObserver is told what the pacers do, e.g. to export it as metrics.
type RateObserver interface {
	// RateRefused: the provider refused one request (429, or 503 with
	// Retry-After).
	RateRefused(key PaceKey)
	// RateWaited: a call waited d for the provider's rate limit.
	RateWaited(key PaceKey, d time.Duration)
	// RatePaced: this replica's pace for key is now rps requests a second
	// (+Inf: unpaced).
	RatePaced(key PaceKey, rps float64)
}

// refusal is a provider's answer that means "not now": 429, or 503 with
// Retry-After.
func refusal(status int, h http.Header) bool {
	return status == http.StatusTooManyRequests ||
		(status == http.StatusServiceUnavailable && (h.Get("Retry-After") != "" || h.Get("retry-after-ms") != ""))
}

// retryAfter is the wait a refusal asks for: retry-after-ms, then
// Retry-After (seconds or an HTTP date), then the reset of an exhausted
// x-ratelimit limit; ok is false when the answer names none.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return time.Duration(s * float64(time.Second)), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), 0), true
		}
	}
	var wait time.Duration
	found := false
	for _, dim := range []string{"requests", "tokens"} {
		rem, ok := headerNumber(h, "x-ratelimit-remaining-"+dim)
		if !ok || rem > 0 {
			continue
		}
		if d, ok := resetDuration(h.Get("x-ratelimit-reset-"+dim), now); ok {
			wait, found = max(wait, d), true
		}
	}
	return wait, found
}

// limits are the x-ratelimit headers of one answer.
type limits struct {
	// rpm and tpm are the limits per minute (0: not sent).
	rpm, tpm float64
	// exhausted: a remaining-* was 0; until is when one more unit is back.
	exhausted bool
	until     time.Duration
}

// readLimits reads the x-ratelimit-limit/remaining/reset-requests and
// -tokens headers. Their limits are per minute, and reset is when the
// remaining count is back at the limit, so one unit comes back every
// reset/(limit-remaining).
func readLimits(h http.Header, now time.Time) limits {
	var l limits
	l.rpm, _ = headerNumber(h, "x-ratelimit-limit-requests")
	l.tpm, _ = headerNumber(h, "x-ratelimit-limit-tokens")
	for _, d := range []struct {
		dim   string
		limit float64
	}{{"requests", l.rpm}, {"tokens", l.tpm}} {
		rem, ok := headerNumber(h, "x-ratelimit-remaining-"+d.dim)
		if !ok || rem > 0 {
			continue
		}
		reset, ok := resetDuration(h.Get("x-ratelimit-reset-"+d.dim), now)
		if !ok {
			continue
		}
		l.exhausted = true
		l.until = max(l.until, time.Duration(float64(reset)/max(d.limit-rem, 1)))
	}
	return l
}

func headerNumber(h http.Header, name string) (float64, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, false
	}
	return n, true
}

// resetDuration reads an x-ratelimit-reset-* value: a Go-style duration
// ("6m0s", "20ms", "1.5s"), plain seconds, or an RFC 3339 time.
func resetDuration(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, true
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// callState is one Complete or GenerateImage call's dealings with its
// pacer, shared with the HTTP middleware through the request's context.
type callState struct {
	pacer  *pacer
	tokens float64 // estimated tokens of the request
	// deadline is when the call gives up waiting (MaxWait after it began
	// to wait, counting only waits).
	maxWait time.Duration
	waited  time.Duration
	onWait  func(time.Duration)
	// Set by the middleware on a refusal: the wait asked for (0: none
	// named), and whether there was one.
	refused    bool
	retryAfter time.Duration
	refusals   int
	lastErr    error     // the last refusal
	departed   time.Time // when the current request left the pacer
}

type callKey struct{}

func withCall(ctx context.Context, cs *callState) context.Context {
	return context.WithValue(ctx, callKey{}, cs)
}

// errWaitTooLong is the middleware's error when its pace wait would pass
// the call's MaxWait; the call turns it into a *RateLimitError.
var errWaitTooLong = errors.New("rate limit wait exceeds the maximum")

// rateLimitError is the call's error once it has waited long enough.
func (cs *callState) rateLimitError() *RateLimitError {
	return &RateLimitError{Endpoint: cs.pacer.key.Endpoint, Model: cs.pacer.key.Model,
		Waited: cs.waited, RetryAfter: cs.retryAfter, Refusals: cs.refusals, Err: cs.lastErr}
}

// notify reports a wait of d to the call's listener when it is long enough
// to be news.
func (cs *callState) notify(d time.Duration) {
	if cs.onWait != nil && d >= waitNotice {
		cs.onWait(d)
	}
}

// sleep waits d for the provider, counting it against the call's MaxWait.
func (cs *callState) sleep(ctx context.Context, d time.Duration) error {
	if cs.waited+d > cs.maxWait {
		return cs.rateLimitError()
	}
	cs.notify(d)
	_, span := tracing.Start(ctx, "rate_limit_wait")
	span.SetString("agentworker.rate_limit.reason", "refused")
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		span.End(ctx.Err())
		return ctx.Err()
	case <-t.C:
	}
	span.End(nil)
	waited := time.Since(start)
	cs.waited += waited
	cs.pacer.waited(waited)
	return nil
}

// refusalBackoff is the wait after a refusal that named none: doubling
// from a second, at most a minute.
func refusalBackoff(refusals int) time.Duration {
	return min(time.Second<<min(max(refusals-1, 0), 6), time.Minute)
}
