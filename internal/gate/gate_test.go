package gate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentworker/agentworker/internal/gate"
)

func TestAtMostSizeWorkAtOnce(t *testing.T) {
	t.Parallel()
	g := gate.New(3)
	var working, most atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			turn, err := g.Enter(t.Context())
			if err != nil {
				t.Error(err)
				return
			}
			defer turn.Leave()
			n := working.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Millisecond) // work
			working.Add(-1)
		})
	}
	wg.Wait()
	if m := most.Load(); m != 3 {
		t.Fatalf("at most %d worked at once, want 3", m)
	}
}

// A task waiting outside its turn lets another work; it is served again
// in arrival order, before one that arrived after it.
func TestOutsideGivesTheTurnAwayAndTakesItBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	g := gate.New(1)
	a, err := g.Enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx := gate.WithTurn(ctx, a)

	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }

	bIn := make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b, err := g.Enter(ctx) // waits until a steps outside
		if err != nil {
			t.Error(err)
			return
		}
		note("b works")
		close(bIn)
		time.Sleep(20 * time.Millisecond)
		b.Leave()
	}()
	err = gate.Outside(actx, func() {
		<-bIn // b can only get in while a waits outside
		note("a waited")
	})
	if err != nil {
		t.Fatal(err)
	}
	note("a works again")
	a.Leave()
	<-bDone
	want := []string{"b works", "a waited", "a works again"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

func TestOutsideEndsWithItsContext(t *testing.T) {
	t.Parallel()
	g := gate.New(1)
	a, err := g.Enter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	actx := gate.WithTurn(ctx, a)
	var other *gate.Turn
	err = gate.Outside(actx, func() {
		// Someone else takes the turn while a waits; then a's task ends.
		other, _ = g.Enter(t.Context())
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Outside after its context ended = %v, want context.Canceled", err)
	}
	a.Leave() // not held: a no-op, not a second release
	other.Leave()
	// Both turns are free again, and a was not given back twice.
	wantOneTurn(t, g)
}

// wantOneTurn fails unless g has exactly one free turn.
func wantOneTurn(t *testing.T, g *gate.Gate) {
	t.Helper()
	one, err := g.Enter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Leave()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Enter(ctx); err == nil {
		t.Fatal("a second turn at once, want one")
	}
}

func TestOutsideWithoutATurnJustWaits(t *testing.T) {
	t.Parallel()
	ran := false
	if err := gate.Outside(t.Context(), func() { ran = true }); err != nil || !ran {
		t.Fatalf("Outside without a turn: ran %t, err %v", ran, err)
	}
	wantOneTurn(t, gate.New(0)) // a gate of 0 still has one turn
}

func TestWaitReturnsTheWaitsResultsOrTheTurnsError(t *testing.T) {
	t.Parallel()
	g := gate.New(1)
	a, err := g.Enter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	actx := gate.WithTurn(ctx, a)
	if v, err := gate.Wait(actx, func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("Wait = %d, %v; want 7, nil", v, err)
	}
	boom := errors.New("boom")
	if _, err := gate.Wait(actx, func() (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("Wait with a failing wait = %v, want boom", err)
	}
	// The wait succeeds, but the task's context ends before a turn is free.
	var other *gate.Turn
	_, err = gate.Wait(actx, func() (int, error) {
		other, _ = g.Enter(t.Context())
		cancel()
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait whose turn never came back = %v, want context.Canceled", err)
	}
	other.Leave()
}
