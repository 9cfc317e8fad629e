package bench

import (
	"strings"
	"testing"
)

// TestMarkdownShowsTheScenariosThatRan: a run of some scenarios prints
// their rows, not zeros for the others; a report that names none (from
// before Scenarios) prints every row.
func TestMarkdownShowsTheScenariosThatRan(t *testing.T) {
	t.Parallel()
	r := Report{Scenarios: []string{"latency", "inflight"}, LatencyMS: Percentiles{P50: 2}, RiverLatencyMS: Percentiles{P50: 2},
		InFlight: InFlight{Tasks: 40, MedianRatio: 1.1}}
	md := r.Markdown()
	for _, want := range []string{"insert → handler start", "tasks in flight", "lock waiters"} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown of latency and inflight shows no %q:\n%s", want, md)
		}
	}
	for _, absent := range []string{"throughput", "LISTEN receipt", "search_files", "agent loop overhead", "RSS", "at a steady"} {
		if strings.Contains(md, absent) {
			t.Errorf("the markdown of latency and inflight shows %q, a scenario that did not run:\n%s", absent, md)
		}
	}
	r.Scenarios = nil
	if md := r.Markdown(); !strings.Contains(md, "throughput") || !strings.Contains(md, "search_files") {
		t.Errorf("the markdown of a report naming no scenarios shows only some rows:\n%s", md)
	}
}
