package sse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentworker/agentworker/events"
)

// Client reads the gateway's event streams: a small, typed EventSource.
type Client struct {
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Token is sent as "Authorization: Bearer <Token>".
	Token string
	// Reconnect is Follow's wait before reconnecting. Defaults to 1 second.
	Reconnect time.Duration
}

// Message is one event received from a stream with its SSE id, the cursor
// to resume after it.
type Message struct {
	ID    string
	Event events.Event
}

// StatusError is a stream request answered with another status than 200.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("event stream: status %d: %s", e.Code, e.Body)
}

// Stream connects to url once, resuming after lastEventID when it is not
// empty, and calls fn with each event until the server ends the stream
// (nil), ctx is done, the connection fails, or fn returns an error. It
// returns the id of the last event fn accepted (lastEventID if none).
func (c *Client) Stream(ctx context.Context, url, lastEventID string, fn func(Message) error) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return lastEventID, fmt.Errorf("event stream %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return lastEventID, fmt.Errorf("event stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return lastEventID, &StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(body))}
	}

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var id, typ string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 { // dispatch
			// Events are unnamed ("message"); a named one, such as the
			// "expired" or "revoked" that ends a stream, is not an event
			// of a task.
			if len(data) > 0 && (typ == "" || typ == "message") {
				var ev events.Event
				if err := json.Unmarshal(data, &ev); err != nil {
					return lastEventID, fmt.Errorf("event stream: event %s: %w", id, err)
				}
				if err := fn(Message{ID: id, Event: ev}); err != nil {
					return lastEventID, err
				}
				lastEventID = id
			}
			data, typ = data[:0], ""
			continue
		}
		if line[0] == ':' {
			continue // comment: heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			id = string(value)
		case "event":
			typ = string(value)
		case "data":
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return lastEventID, ctx.Err()
		}
		return lastEventID, fmt.Errorf("event stream: %w", err)
	}
	return lastEventID, nil
}

// Follow is Stream that reconnects with Last-Event-ID after the stream ends
// or the connection drops, as EventSource does, until ctx is done or fn
// returns an error. A status other than 200 (401, 403, 404) ends it.
func (c *Client) Follow(ctx context.Context, url, lastEventID string, fn func(Message) error) error {
	wait := c.Reconnect
	if wait <= 0 {
		wait = time.Second
	}
	var fnErr error
	record := func(m Message) error {
		fnErr = fn(m)
		return fnErr
	}
	for {
		var err error
		lastEventID, err = c.Stream(ctx, url, lastEventID, record)
		var se *StatusError
		switch {
		case fnErr != nil:
			return fnErr
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &se):
			return err
		}
		// The stream ended or the connection dropped: resume after the
		// last event, like EventSource.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
