package traceid_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/traceid"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"req-42_a.b", true},
		{strings.Repeat("a", traceid.MaxLen), true},
		{"", false},
		{strings.Repeat("a", traceid.MaxLen+1), false},
		{"a b", false},
		{"a\nb", false},
		{"a\x1b[31mb", false},
		{"<script>", false},
		{"é", false},
	} {
		if got := traceid.Valid(tc.id); got != tc.want {
			t.Errorf("Valid(%q) = %t, want %t", tc.id, got, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	a, b := traceid.New(), traceid.New()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a) || a == strings.Repeat("0", 32) {
		t.Fatalf("New() = %q, want 32 lowercase hex, not all zeros", a)
	}
	if a == b {
		t.Fatalf("New() returned %q twice", a)
	}
}

func TestFromRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		kept         bool
	}{
		{"Valid", "abc-123", true},
		{"Missing", "", false},
		{"TooLong", strings.Repeat("x", traceid.MaxLen+1), false},
		{"BadChars", "abc\r\nSet-Cookie: x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			if tc.header != "" {
				r.Header.Set(traceid.Header, tc.header)
			}
			got := traceid.FromRequest(r)
			if tc.kept != (got == tc.header) || !traceid.Valid(got) {
				t.Fatalf("FromRequest with %q = %q, want kept=%t and valid", tc.header, got, tc.kept)
			}
		})
	}
}

// records decodes the JSON log lines written to buf.
func records(t *testing.T, buf *logtest.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf logtest.Buffer
	// Wrapped twice, as a process logger passed to a package that wraps
	// its own: the id is still written once.
	log := slog.New(traceid.NewHandler(traceid.NewHandler(slog.NewJSONHandler(&buf, nil))))
	ctx := traceid.With(context.Background(), "t-1")
	log.InfoContext(ctx, "with context")
	log.InfoContext(context.Background(), "without")
	log.With(traceid.Key, "own").InfoContext(ctx, "own id")
	recs := records(t, &buf)
	if len(recs) != 3 {
		t.Fatalf("got %d log lines, want 3: %s", len(recs), buf.String())
	}
	if recs[0][traceid.Key] != "t-1" {
		t.Errorf("line with a traced context: trace_id = %v, want t-1", recs[0][traceid.Key])
	}
	if _, ok := recs[1][traceid.Key]; ok {
		t.Errorf("line without a trace: trace_id = %v, want none", recs[1][traceid.Key])
	}
	if recs[2][traceid.Key] != "own" || strings.Count(buf.String(), `"trace_id"`) != 2 {
		t.Errorf("a logger with its own trace_id: want it alone, got %s", buf.String())
	}
}
