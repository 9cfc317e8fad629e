package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/worker"
)

func TestRetentionDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "keep"}, {in: "0"},
		{in: "30d", want: 30 * 24 * time.Hour},
		{in: "720h", want: 720 * time.Hour},
		{in: "0d", bad: true}, {in: "-1h", bad: true}, {in: "10m", bad: true}, {in: "forever", bad: true},
	} {
		var r retention
		err := r.Decode(tc.in)
		if (err != nil) != tc.bad || time.Duration(r) != tc.want {
			t.Errorf("Decode(%q) = %s, %v; want %s (error: %v)", tc.in, time.Duration(r), err, tc.want, tc.bad)
		}
	}
}

// TestArchivedRetentionWarnsOnlyWhenSet: without an archive events are
// kept; the log warns that EVENTS_RETENTION is ignored only when the
// operator set it, not for its default.
func TestArchivedRetentionWarnsOnlyWhenSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  bool
		warn bool
	}{{"Default", false, false}, {"SetByOperator", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r := archivedRetention(worker.RetentionConfig{Events: 30 * 24 * time.Hour}, nil, log, tc.set)
			if warned := strings.Contains(buf.String(), "level=WARN"); r.Events != 0 || warned != tc.warn {
				t.Errorf("events kept %s, warned %v (%q); want kept forever, warned %v", r.Events, warned, buf.String(), tc.warn)
			}
		})
	}
}
