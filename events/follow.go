package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
)

// ErrStopFollowing, returned by a Follow callback, ends Follow with a nil error.
var ErrStopFollowing = errors.New("stop following")

// followRecheck bounds how long Follow trusts notifications alone: it
// re-reads the table this often even if none arrived (a dropped notify,
// a listener reconnect).
const followRecheck = 2 * time.Second

const followBatch = 500

// Follow calls fn with every event of a task whose seq is greater than
// afterSeq, in seq order, each exactly once: first the backlog, then live
// events as they are committed. It LISTENs before reading the backlog, so an
// event committed in between is not missed. It returns when ctx is done (with
// ctx's error), when fn returns ErrStopFollowing (nil), or fn's other errors.
func Follow(ctx context.Context, pool *pgxpool.Pool, taskID uuid.UUID, afterSeq int, fn func(Event) error) error {
	return FollowArchived(ctx, pool, nil, taskID, afterSeq, fn)
}

// FollowArchived is Follow for a task whose timeline may be archived: the
// events moved out of agent_events are read from arch (ReadTimeline), in
// the same order, before the rows. arch may be nil.
func FollowArchived(ctx context.Context, pool *pgxpool.Pool, arch Archive, taskID uuid.UUID, afterSeq int, fn func(Event) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("follow task %s: acquire listener connection: %w", taskID, err)
	}
	// A connection that LISTENed must not go back to the pool still listening.
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *"); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		return fmt.Errorf("follow task %s: listen: %w", taskID, err)
	}

	cursor := afterSeq
	catchUp := func() error {
		var ferr error // fn's, returned as it is
		next, err := ReadTimeline(ctx, pool, arch, taskID, cursor, followBatch, func(ev Event) error {
			cursor = ev.Seq
			ferr = fn(ev)
			return ferr
		})
		cursor = max(cursor, next)
		switch {
		case ferr != nil:
			return ferr
		case err != nil:
			return fmt.Errorf("follow task %s: %w", taskID, err)
		}
		return nil
	}
	if err := catchUp(); err != nil {
		return stopErr(err)
	}
	for {
		waitCtx, cancel := context.WithTimeout(ctx, followRecheck)
		n, err := conn.Conn().WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Periodic re-check below.
		case err != nil:
			return fmt.Errorf("follow task %s: wait for notification: %w", taskID, err)
		default:
			var key agentsql.Announcement
			if json.Unmarshal([]byte(n.Payload), &key) != nil || !slices.Contains(key.Tasks, taskID) {
				continue
			}
		}
		if err := catchUp(); err != nil {
			return stopErr(err)
		}
	}
}

func stopErr(err error) error {
	if errors.Is(err, ErrStopFollowing) {
		return nil
	}
	return err
}
