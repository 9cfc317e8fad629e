package scripted

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// RateLimit makes a server refuse chat completions as providers do: past
// a pace (a token bucket of RPS requests a second holding one second's
// worth, and a 429 with Retry-After, whole seconds and at least 1, for a
// request that finds it empty), and at random whatever the pace (Storm).
// Refused requests never reach the Responder. It is safe for concurrent
// use, and may be shared by several servers to give them one limit.
type RateLimit struct {
	// RPS is the requests a second the server answers (0: no pace limit).
	RPS float64
	// Headers makes every answer, refusals included, carry
	// x-ratelimit-limit-requests (per minute), x-ratelimit-remaining-requests
	// and x-ratelimit-reset-requests (until the bucket is full), as
	// OpenAI's API does. Without it only refusals say anything: Retry-After.
	// Needs RPS.
	Headers bool
	// Storm is the fraction of requests refused at random with 429 and
	// Retry-After: 1, whatever the pace (0: none).
	Storm float64
	// Seed seeds the storm's random choices.
	Seed uint64

	mu       sync.Mutex
	rng      *rand.Rand
	tokens   float64
	at       time.Time
	answered int
	refused  int
}

// take spends one request from the bucket, reporting whether there was
// one, and sets the answer's headers.
func (l *RateLimit) take(h http.Header, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Storm > 0 {
		if l.rng == nil {
			l.rng = rand.New(rand.NewPCG(l.Seed, l.Seed^0x9e3779b97f4a7c15))
		}
		if l.rng.Float64() < l.Storm {
			l.refused++
			h.Set("Retry-After", "1")
			return false
		}
	}
	if l.RPS <= 0 {
		l.answered++
		return true
	}
	burst := max(l.RPS, 1)
	if l.at.IsZero() {
		l.tokens = burst
	} else {
		l.tokens = min(l.tokens+now.Sub(l.at).Seconds()*l.RPS, burst)
	}
	l.at = now
	ok := l.tokens >= 1
	if ok {
		l.tokens--
		l.answered++
	} else {
		l.refused++
		wait := math.Ceil((1 - l.tokens) / l.RPS)
		h.Set("Retry-After", strconv.Itoa(int(max(wait, 1))))
	}
	if l.Headers {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(int(math.Round(l.RPS*60))))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(l.tokens)))
		full := time.Duration((burst - l.tokens) / l.RPS * float64(time.Second)).Round(time.Millisecond)
		h.Set("x-ratelimit-reset-requests", full.String())
	}
	return ok
}

// Counts returns how many requests were answered and refused so far.
func (l *RateLimit) Counts() (answered, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answered, l.refused
}
