package worker

import (
	"context"
	"log/slog"
	"strings"
)

// riverLog is the handler River logs through: h, with River's periodic
// "<producer>: Producer job counts" line (at info, every 5 s while a
// queue's counts change) moved to debug. River's Config has no level per
// line, and the line is no event an operator acts on; the message is all
// that tells it apart.
type riverLog struct{ h slog.Handler }

// producerJobCounts ends the message of River's producer's counts line.
const producerJobCounts = ": Producer job counts"

func (l riverLog) Enabled(ctx context.Context, level slog.Level) bool { return l.h.Enabled(ctx, level) }

func (l riverLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.HasSuffix(r.Message, producerJobCounts) {
		if !l.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r = r.Clone()
		r.Level = slog.LevelDebug
	}
	return l.h.Handle(ctx, r)
}

func (l riverLog) WithAttrs(attrs []slog.Attr) slog.Handler { return riverLog{l.h.WithAttrs(attrs)} }
func (l riverLog) WithGroup(name string) slog.Handler       { return riverLog{l.h.WithGroup(name)} }
