package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestRiverLogQuietsJobCounts: River's producer's job counts line is
// logged at debug, so an info log leaves it out; River's other lines keep
// their level, and attributes added through With stay.
func TestRiverLogQuietsJobCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  []string // the lines logged, level and message
	}{
		{"Info", slog.LevelInfo, []string{"level=INFO msg=\"producer: Started\"", "level=WARN msg=\"producer: slow\""}},
		{"Debug", slog.LevelDebug, []string{"level=INFO msg=\"producer: Started\"", "level=DEBUG msg=\"producer: Producer job counts\"",
			"level=WARN msg=\"producer: slow\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(riverLog{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level})}).With(slog.String("client", "c1"))
			ctx := context.Background()
			log.InfoContext(ctx, "producer: Started")
			log.InfoContext(ctx, "producer: Producer job counts", slog.Int("num_jobs_running", 1))
			log.WarnContext(ctx, "producer: slow")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("logged %q, want %d lines", lines, len(tc.want))
			}
			for i, l := range lines {
				if !strings.Contains(l, tc.want[i]) || !strings.Contains(l, "client=c1") {
					t.Errorf("line %d = %q, want %s with client=c1", i, l, tc.want[i])
				}
			}
		})
	}
}
