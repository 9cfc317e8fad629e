// Package gate bounds how many of a process's tasks work at once, as
// opposed to wait. A process runs hundreds of tasks that mostly wait on
// their model; when many answers come back together, letting every task
// work at once shares the CPU (and the database) among all of them, so all
// finish late together. Through the gate they take turns in arrival order:
// a task holds a turn while it works and gives it up while it waits (a
// model call, a tool, a project check), so the first back are the first
// done, and the rest wait their turn without slowing them.
package gate

import (
	"context"
	"fmt"

	"golang.org/x/sync/semaphore"
)

// Gate hands out turns, at most n at once, to waiters in arrival order.
type Gate struct {
	sem *semaphore.Weighted
}

// New returns a gate of n turns (at least 1).
func New(n int) *Gate {
	return &Gate{sem: semaphore.NewWeighted(int64(max(n, 1)))}
}

// Enter waits for a turn. The returned Turn is held by one task, used by
// one goroutine at a time; Leave gives it back.
func (g *Gate) Enter(ctx context.Context) (*Turn, error) {
	if err := g.sem.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("wait for a turn to work: %w", err)
	}
	return &Turn{g: g, held: true}, nil
}

// Turn is a task's place in the gate.
type Turn struct {
	g    *Gate
	held bool
}

// Leave gives the turn back, if held.
func (t *Turn) Leave() {
	if t != nil && t.held {
		t.held = false
		t.g.sem.Release(1)
	}
}

// outside runs wait without the turn and takes a turn again afterwards.
func (t *Turn) outside(ctx context.Context, wait func()) error {
	if t == nil || !t.held {
		wait()
		return nil
	}
	t.Leave()
	wait()
	if err := t.g.sem.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("wait for a turn to work: %w", err)
	}
	t.held = true
	return nil
}

type turnKey struct{}

// WithTurn returns ctx carrying the task's turn.
func WithTurn(ctx context.Context, t *Turn) context.Context {
	return context.WithValue(ctx, turnKey{}, t)
}

// Outside runs wait, a wait of the task whose turn ctx carries, without
// that turn, and returns once the task has a turn again; an error means
// ctx ended before it had one. Without a turn in ctx it just runs wait.
func Outside(ctx context.Context, wait func()) error {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t.outside(ctx, wait)
}

// Wait is Outside for a wait with results: it returns wait's, or, when
// wait succeeded but ctx ended before the task had a turn again, that error.
func Wait[T any](ctx context.Context, wait func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	if gerr := Outside(ctx, func() { v, err = wait() }); gerr != nil && err == nil {
		err = gerr
	}
	return v, err
}
