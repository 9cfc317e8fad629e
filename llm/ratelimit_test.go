package llm_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// observed records what a client's pacers report.
type observed struct {
	mu       sync.Mutex
	refused  int
	waited   time.Duration
	lastPace float64
}

func (o *observed) RateRefused(llm.PaceKey) { o.mu.Lock(); o.refused++; o.mu.Unlock() }
func (o *observed) RateWaited(_ llm.PaceKey, d time.Duration) {
	o.mu.Lock()
	o.waited += d
	o.mu.Unlock()
}
func (o *observed) RatePaced(_ llm.PaceKey, rps float64) {
	o.mu.Lock()
	o.lastPace = rps
	o.mu.Unlock()
}

func (o *observed) pace() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastPace
}

// completeAll makes n calls at once and returns how long they took.
func completeAll(t *testing.T, client *llm.Client, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := client.Complete(t.Context(), userRequest("hi")); err != nil {
				t.Errorf("complete: %v", err)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// TestRateLimitPacing sends more calls at once than a provider limiting
// requests per second answers, twice: every call succeeds; the first wave
// goes unpaced until the first refusal, so its burst is refused past the
// provider's bucket; the second, paced from the start, is refused little
// and takes about the limit's time.
func TestRateLimitPacing(t *testing.T) {
	t.Parallel()
	const (
		rps   = 20
		calls = 200
	)
	for _, tt := range []struct {
		name    string
		headers bool
	}{
		{name: "RetryAfterOnly", headers: false},
		{name: "RateLimitHeaders", headers: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			limit := &scripted.RateLimit{RPS: rps, Headers: tt.headers}
			srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }),
				llmtest.Limit(limit))
			obs := &observed{}
			client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries, c.RateLimit.Observer = -1, obs })

			completeAll(t, client, calls)
			answered1, refused1 := limit.Counts()
			t.Logf("first wave: %d answered, %d refused", answered1, refused1)
			if answered1 != calls || refused1 > calls {
				t.Errorf("first wave: %d answered, %d refused; want %d answered, at most as many refused", answered1, refused1, calls)
			}
			elapsed := completeAll(t, client, calls)
			answered2, refused2 := limit.Counts()
			answered, refused := answered2-answered1, refused2-refused1
			ideal := time.Duration(float64(calls) / rps * float64(time.Second))
			t.Logf("second wave: %d answered, %d refused (%.1f%%), %s for an ideal %s", answered, refused,
				100*float64(refused)/float64(answered), elapsed.Round(time.Millisecond), ideal)
			if answered != calls {
				t.Errorf("%d calls answered, want %d", answered, calls)
			}
			if float64(refused) > 0.1*calls {
				t.Errorf("%d calls refused, want at most 10%% of %d", refused, calls)
			}
			if obs.refused != refused2 {
				t.Errorf("observer saw %d refusals, the server made %d", obs.refused, refused2)
			}
			// Generous: the machine is shared. The bench measures closely.
			if elapsed > 2*ideal {
				t.Errorf("took %s, want about %s", elapsed, ideal)
			}
			if tt.headers && math.Abs(obs.pace()-rps) > 0.01 {
				t.Errorf("pace = %.2f/s, want the %d/s the headers say", obs.pace(), rps)
			}
		})
	}
}

// TestRateLimitRetryAfter: a refused call waits as asked, outside
// MaxRetries, says so, and gives up with a *RateLimitError once the wait
// would pass MaxWait.
func TestRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		replies    []scripted.Reply
		maxWait    time.Duration
		wantWaits  []time.Duration // reported to OnRateLimitWait
		wantBusy   bool
		wantMinDur time.Duration
	}{
		{
			name:       "RetryAfterHonoured",
			replies:    []scripted.Reply{llmtest.Error(http.StatusTooManyRequests, "2"), llmtest.Text("ok")},
			wantWaits:  []time.Duration{2 * time.Second},
			wantMinDur: 2 * time.Second,
		},
		{
			name: "ServiceUnavailableWithRetryAfter",
			replies: []scripted.Reply{{Status: http.StatusServiceUnavailable, RetryAfter: "1"},
				llmtest.Text("ok")},
			wantWaits:  []time.Duration{time.Second},
			wantMinDur: time.Second,
		},
		{
			name:     "PastMaxWait",
			replies:  []scripted.Reply{llmtest.Error(http.StatusTooManyRequests, "120"), llmtest.Text("never reached")},
			maxWait:  time.Minute,
			wantBusy: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.New(t, tt.replies...)
			client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries, c.RateLimit.MaxWait = -1, tt.maxWait })
			var waits []time.Duration
			req := userRequest("hi")
			req.OnRateLimitWait = func(d time.Duration) { waits = append(waits, d) }
			start := time.Now()
			resp, err := client.Complete(t.Context(), req)
			if tt.wantBusy {
				var busy *llm.RateLimitError
				if !errors.As(err, &busy) || busy.Refusals != 1 || busy.RetryAfter != 2*time.Minute {
					t.Fatalf("err = %v, want a *RateLimitError after 1 refusal asking for 2m", err)
				}
				var api *llm.APIError
				if !errors.As(err, &api) || api.StatusCode != http.StatusTooManyRequests || !llm.IsTransient(err) {
					t.Errorf("err = %v, want it to wrap the 429 and be transient", err)
				}
				if n := len(srv.Requests()); n != 1 {
					t.Errorf("%d requests, want 1: the wait asked for is past MaxWait", n)
				}
				return
			}
			if err != nil || resp.Message.Content != "ok" {
				t.Fatalf("complete = %q, %v; want ok", resp.Message.Content, err)
			}
			if d := time.Since(start); d < tt.wantMinDur {
				t.Errorf("answered after %s, before the %s asked for", d, tt.wantMinDur)
			}
			if resp.RateLimitWait < tt.wantMinDur {
				t.Errorf("RateLimitWait = %s, want the %s waited", resp.RateLimitWait, tt.wantMinDur)
			}
			if len(waits) != len(tt.wantWaits) || waits[0] != tt.wantWaits[0] {
				t.Errorf("waits reported = %v, want %v", waits, tt.wantWaits)
			}
		})
	}
}

// TestRateLimitWaitOfAFailedCall: a call that waited and then gave up still
// reports what it waited, as its *RateLimitError does.
func TestRateLimitWaitOfAFailedCall(t *testing.T) {
	t.Parallel()
	srv := llmtest.New(t, llmtest.Error(http.StatusTooManyRequests, "1"), llmtest.Error(http.StatusTooManyRequests, "120"))
	client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries, c.RateLimit.MaxWait = -1, time.Minute })
	resp, err := client.Complete(t.Context(), userRequest("hi"))
	busy, ok := errors.AsType[*llm.RateLimitError](err)
	if !ok || busy.Refusals != 2 {
		t.Fatalf("err = %v, want a *RateLimitError after 2 refusals", err)
	}
	if resp.RateLimitWait < time.Second || resp.RateLimitWait != busy.Waited {
		t.Errorf("RateLimitWait = %s, error's Waited %s; want the second waited, in both", resp.RateLimitWait, busy.Waited)
	}
}

// TestRateLimitTokens: with LLM_MAX_TPM set, calls leave no faster than
// their tokens allow, beyond a burst of a tenth of a minute's worth.
func TestRateLimitTokens(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }))
	const (
		calls  = 10
		tokens = 10000 // per call: a prompt of 40,000 bytes
		tpm    = 600000
	)
	client := newClient(t, srv, func(c *llm.Config) { c.RateLimit.MaxTPM = tpm })
	prompt := strings.Repeat("x", 4*tokens)
	start := time.Now()
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if _, err := client.Complete(t.Context(), userRequest(prompt)); err != nil {
				t.Errorf("complete: %v", err)
			}
		})
	}
	wg.Wait()
	// 100,000 tokens at 10,000/s with 60,000 at once: about 4 s.
	burst := float64(tpm) / 60 * 6
	want := time.Duration((calls*tokens - burst) / (tpm / 60) * float64(time.Second))
	if elapsed := time.Since(start); elapsed < want*3/4 {
		t.Errorf("%d calls of %d tokens took %s, want at least about %s at %d tokens a minute", calls, tokens, elapsed, want, tpm)
	}
}

// TestInsufficientQuotaIsNotWaitedOut: a 429 saying the account is out of
// credit fails at once, as an error trying again will not mend.
func TestInsufficientQuotaIsNotWaitedOut(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply {
		return scripted.Reply{Status: http.StatusTooManyRequests, RetryAfter: "1", ErrorMessage: "You exceeded your current quota.",
			ErrorCode: "insufficient_quota"}
	}))
	client := newClient(t, srv, nil)
	_, err := client.Complete(t.Context(), userRequest("hi"))
	var api *llm.APIError
	if !errors.As(err, &api) || api.StatusCode != http.StatusTooManyRequests || llm.IsTransient(err) {
		t.Fatalf("err = %v, want a non-transient 429", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestRateLimitUnpacedStart: calls to a provider that has refused none and
// sent no x-ratelimit header leave at once, however many there are.
func TestRateLimitUnpacedStart(t *testing.T) {
	t.Parallel()
	const calls = 100
	srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }))
	obs := &observed{}
	client := newClient(t, srv, func(c *llm.Config) { c.RateLimit.Observer = obs })
	completeAll(t, client, calls)
	if obs.waited != 0 || obs.refused != 0 {
		t.Errorf("calls waited %s for the pace (%d refusals), want none before a refusal", obs.waited, obs.refused)
	}
}

// TestRateLimitStorm: a provider refusing 40% of calls at random with
// Retry-After: 1, whatever the pace. Each refused call waits its second
// and tries again; the random refusals do not pull the pace down, so 200
// two-call builds all finish, with about as many refusals as the storm
// makes (0.67 a call), not a growing queue. The builds start at once, or
// one every 10 ms, so that few calls have an outcome when the first is
// refused.
func TestRateLimitStorm(t *testing.T) {
	t.Parallel()
	const builds = 200
	for _, tt := range []struct {
		name  string
		every time.Duration
	}{
		{name: "AtOnce"},
		{name: "Trickle", every: 10 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			limit := &scripted.RateLimit{Storm: 0.4, Seed: 46}
			srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }),
				llmtest.Limit(limit))
			obs := &observed{}
			client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries, c.RateLimit.Observer = -1, obs })
			// A bound, not a speed target: the builds take seconds unpaced,
			// and stalled for minutes when random refusals collapsed the
			// pace.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			var failed atomic.Int64
			tick := time.NewTicker(max(tt.every, time.Microsecond))
			defer tick.Stop()
			for range builds {
				if tt.every > 0 {
					<-tick.C
				}
				wg.Go(func() {
					for range 2 {
						if _, err := client.Complete(ctx, userRequest("hi")); err != nil {
							failed.Add(1)
							return
						}
					}
				})
			}
			wg.Wait()
			answered, refused := limit.Counts()
			t.Logf("%d answered, %d refused, pace %.1f/s", answered, refused, obs.pace())
			if n := failed.Load(); n != 0 {
				t.Errorf("%d of %d builds failed", n, builds)
			}
			if answered != 2*builds {
				t.Errorf("%d calls answered, want %d", answered, 2*builds)
			}
			if refused > 2*answered {
				t.Errorf("%d calls refused, want at most twice the %d answered", refused, answered)
			}
			if pace := obs.pace(); !math.IsInf(pace, 1) {
				t.Errorf("pace %.1f/s at the end, want none: random refusals are not the pace's doing", pace)
			}
		})
	}
}
