package sql_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestProviderBudgetShare: replicas agree on one limit, count each other
// while their leases run, and a replica that stops renewing stops counting
// once its lease ends.
func TestProviderBudgetShare(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	key := llm.PaceKey{Endpoint: "api.example.test/v1", Model: "m"}
	a := &agentsql.ProviderBudget{DB: pool, Replica: "a", Lease: 2 * time.Second}
	b := &agentsql.ProviderBudget{DB: pool, Replica: "b", Lease: 2 * time.Second}
	other := llm.PaceKey{Endpoint: key.Endpoint, Model: "other"}

	share := func(r *agentsql.ProviderBudget, k llm.PaceKey, mine llm.PaceState) (llm.PaceState, int) {
		t.Helper()
		got, live, err := r.Share(t.Context(), k, mine)
		if err != nil {
			t.Fatalf("share as %s: %v", r.Replica, err)
		}
		return got, live
	}
	if got, live := share(a, key, llm.PaceState{RPS: 40, Probing: true}); live != 1 || got.RPS != 40 || !got.Probing {
		t.Errorf("alone: %+v with %d live, want its own view", got, live)
	}
	// b was refused at 14/s: the lower settled estimate holds for both.
	if got, live := share(b, key, llm.PaceState{RPS: 14}); live != 2 || got.RPS != 14 || got.Probing {
		t.Errorf("b: %+v with %d live, want 14/s settled with 2 live", got, live)
	}
	until := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	if got, live := share(a, key, llm.PaceState{RPS: 20, Learned: true, BlockedUntil: until}); live != 2 || got.RPS != 20 || !got.Learned || !got.BlockedUntil.Equal(until) {
		t.Errorf("a learned: %+v with %d live, want the learned 20/s, blocked until %s", got, live, until)
	}
	if got, _ := share(b, key, llm.PaceState{RPS: 14}); got.RPS != 20 || !got.Learned || !got.BlockedUntil.Equal(until) {
		t.Errorf("b after a learned: %+v, want a's learned 20/s and its wait", got)
	}
	if _, live := share(a, other, llm.PaceState{RPS: 5}); live != 1 {
		t.Errorf("another model counts %d live replicas, want 1: keys are separate", live)
	}
	// a goes quiet: b is alone once a's lease has run out.
	poll.Until(t, "a's lease to end", 10*time.Second, func() bool {
		_, live := share(b, key, llm.PaceState{RPS: 14})
		return live == 1
	})
}

// TestProviderBudgetFourReplicas: four clients, each its own replica,
// call one provider limiting requests a second, together more than it
// allows, in two waves: the first goes unpaced until the first refusal;
// in the second, through the shared budget, they stay within the limit.
func TestProviderBudgetFourReplicas(t *testing.T) {
	t.Parallel()
	const (
		rps      = 20
		replicas = 4
		calls    = 50 // per replica and wave
	)
	for _, tt := range []struct {
		name    string
		headers bool
		// refusals allowed in the second wave, a share of its answers.
		// Without headers the replicas probe past the limit now and then;
		// paced alone, each at the whole limit, they would be refused
		// three times in four. The providerlimit bench measures the
		// figure.
		maxRefused float64
	}{
		{name: "RetryAfterOnly", maxRefused: 0.3},
		{name: "RateLimitHeaders", headers: true, maxRefused: 0.2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			limit := &scripted.RateLimit{RPS: rps, Headers: tt.headers}
			srv := llmtest.NewWith(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("ok") }), llmtest.Limit(limit))
			clients := make([]*llm.Client, replicas)
			for i := range clients {
				cfg := srv.Config()
				cfg.MaxRetries = -1
				cfg.RateLimit.Share = &agentsql.ProviderBudget{DB: pool, Replica: fmt.Sprintf("replica-%d", i)}
				client, err := llm.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = client
			}
			wave := func() time.Duration {
				t.Helper()
				start := time.Now()
				var wg sync.WaitGroup
				for _, client := range clients {
					for range calls {
						wg.Go(func() {
							if _, err := client.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}); err != nil {
								t.Errorf("complete: %v", err)
							}
						})
					}
				}
				wg.Wait()
				return time.Since(start)
			}
			wave()
			answered1, refused1 := limit.Counts()
			t.Logf("first wave: %d answered, %d refused", answered1, refused1)
			elapsed := wave()
			answered2, refused2 := limit.Counts()
			answered, refused := answered2-answered1, refused2-refused1
			ideal := time.Duration(float64(replicas*calls) / rps * float64(time.Second))
			t.Logf("second wave: %d answered, %d refused (%.1f%%), %s for an ideal %s", answered, refused,
				100*float64(refused)/float64(answered), elapsed.Round(time.Millisecond), ideal)
			if answered1 != replicas*calls || answered != replicas*calls {
				t.Errorf("%d and %d calls answered, want %d in each wave", answered1, answered, replicas*calls)
			}
			if float64(refused) > tt.maxRefused*float64(answered) {
				t.Errorf("%d calls refused, want at most %.0f%% of %d", refused, 100*tt.maxRefused, answered)
			}
			// Generous: the machine is shared. The bench measures closely.
			if elapsed > 2*ideal {
				t.Errorf("took %s, want about %s", elapsed, ideal)
			}
		})
	}
}

// TestProviderBudgetUnpaced: a replica that found a provider's refusals
// not its pace's doing publishes no pace (+Inf); the others take it as
// the newest estimate. One that knows nothing yet (0) does not count.
func TestProviderBudgetUnpaced(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	key := llm.PaceKey{Endpoint: "api.example.test/v1", Model: "m"}
	a := &agentsql.ProviderBudget{DB: pool, Replica: "a"}
	b := &agentsql.ProviderBudget{DB: pool, Replica: "b"}
	c := &agentsql.ProviderBudget{DB: pool, Replica: "c"}
	if _, _, err := a.Share(t.Context(), key, llm.PaceState{RPS: 14}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Share(t.Context(), key, llm.PaceState{RPS: math.Inf(1)}); err != nil {
		t.Fatal(err)
	}
	got, live, err := c.Share(t.Context(), key, llm.PaceState{})
	if err != nil {
		t.Fatal(err)
	}
	if live != 3 || !math.IsInf(got.RPS, 1) || got.Probing || got.Learned {
		t.Errorf("agreed %+v among %d, want +Inf (the newest estimate) among 3", got, live)
	}
}
