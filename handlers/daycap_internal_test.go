package handlers

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestUncapped: a project found without a cap is taken to have none for
// the ttl, then read again; found capped, it is forgotten at once; the
// memory is bounded.
func TestUncapped(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p := uuid.New()
	tests := []struct {
		name  string
		steps func(u *uncapped)
		at    time.Duration
		known bool
	}{
		{"NeverRead", func(*uncapped) {}, 0, false},
		{"FoundUncapped", func(u *uncapped) { u.note(p, false, now) }, 999 * time.Millisecond, true},
		{"Stale", func(u *uncapped) { u.note(p, false, now) }, time.Second, false},
		{"FoundCapped", func(u *uncapped) { u.note(p, false, now); u.note(p, true, now) }, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUncapped(time.Second)
			tt.steps(u)
			if got := u.known(p, now.Add(tt.at)); got != tt.known {
				t.Errorf("known = %v, want %v", got, tt.known)
			}
		})
	}
	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		u := newUncapped(time.Second)
		for range maxUncapped + 10 {
			u.note(uuid.New(), false, now)
		}
		if len(u.seen) > maxUncapped {
			t.Fatalf("%d projects remembered, want at most %d", len(u.seen), maxUncapped)
		}
		// Once the others are stale, a new one is remembered.
		u.note(p, false, now.Add(2*time.Second))
		if !u.known(p, now.Add(2*time.Second)) || len(u.seen) != 1 {
			t.Fatalf("after the stale were forgotten: known %v, %d remembered", u.known(p, now.Add(2*time.Second)), len(u.seen))
		}
	})
}
