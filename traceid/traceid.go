// Package traceid names the work one request started: the id comes from the
// request's X-Trace-ID header when it is safe to repeat, else it is made
// here (32 lowercase hex, as a W3C trace-id). It travels in a context, and
// Handler adds it to every log line written with that context as trace_id.
package traceid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// Header is the HTTP header a trace id is read from and answered in.
const Header = "X-Trace-ID"

// MaxLen bounds a trace id a client sends: it is repeated in headers, logs,
// rows and events.
const MaxLen = 64

// Key is the log attribute (and event field stem) that carries the id.
const Key = "trace_id"

// Valid reports whether s may be taken as a trace id: 1 to MaxLen bytes of
// letters, digits, '-', '_' and '.'. Nothing else is safe to repeat into a
// header, a log line or a terminal.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// New returns a fresh id: 16 random bytes in lowercase hex, never all
// zeros (an invalid W3C trace-id).
func New() string {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		if b != [16]byte{} {
			return hex.EncodeToString(b[:])
		}
	}
}

// FromRequest returns r's X-Trace-ID when Valid, else a new id: a hostile
// or malformed header is replaced, never echoed.
func FromRequest(r *http.Request) string {
	if id := r.Header.Get(Header); Valid(id) {
		return id
	}
	return New()
}

type ctxKey struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the id ctx carries, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Handler is a slog.Handler that adds the context's trace id to each record
// as trace_id, unless the logger carries a trace_id of its own already.
type Handler struct {
	next slog.Handler
	has  bool // a trace_id came with WithAttrs
}

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler {
	return &Handler{next: next}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, rec slog.Record) error {
	id := From(ctx)
	if id == "" || h.has {
		return h.next.Handle(ctx, rec)
	}
	rec = rec.Clone()
	rec.AddAttrs(slog.String(Key, id))
	// Added once: a Handler further down the chain adds it no more.
	return h.next.Handle(With(ctx, ""), rec)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.has
	for _, a := range as {
		has = has || a.Key == Key
	}
	return &Handler{next: h.next.WithAttrs(as), has: has}
}

// WithGroup implements slog.Handler; the id of a record logged within a
// group is written in that group.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), has: h.has}
}
