package bench

import (
	"fmt"
	"time"
)

// GuardScenarios are the scenarios Guard judges.
var GuardScenarios = []string{"latency", "events", "inflight"}

// GuardInFlightModelDelay is the model delay of the in-flight scenario
// Guard judges: long enough that the ratio to the ideal measures waiting
// for a turn, not a task's fixed cost (with the quick run's 100 ms, a
// task's own statements alone are most of the ideal's 200 ms).
const GuardInFlightModelDelay = time.Second

// The regressions a user would feel, with room for a shared machine: CI
// fails past them.
const (
	guardReceiptP99MS   = 50  // write → LISTEN and → SSE receipt p99
	guardPickupVsRiver  = 2.0 // insert → handler start p50 over tuned River's
	guardInFlightMedian = 2.0 // insert → done over the ideal, median
)

// Guard returns what in r is past the limits of a regression a user would
// feel; none is a pass. Scenarios r did not run are not judged.
func Guard(r Report) []string {
	var out []string
	for _, m := range []struct {
		name string
		p    Percentiles
	}{{"write → LISTEN receipt", r.EventReceiptMS}, {"write → SSE receipt", r.SSEReceiptMS}} {
		if m.p.P99 > guardReceiptP99MS {
			out = append(out, fmt.Sprintf("%s p99 %.1f ms, over %d ms", m.name, m.p.P99, guardReceiptP99MS))
		}
	}
	if r.RiverLatencyMS.P50 > 0 && r.LatencyMS.P50 > guardPickupVsRiver*r.RiverLatencyMS.P50 {
		out = append(out, fmt.Sprintf("insert → handler start p50 %.2f ms, over %.0f× tuned River's %.2f ms in the same run",
			r.LatencyMS.P50, guardPickupVsRiver, r.RiverLatencyMS.P50))
	}
	if r.InFlight.MedianRatio > guardInFlightMedian {
		out = append(out, fmt.Sprintf("tasks in flight: insert → done median %.2f× the ideal, over %.0f×", r.InFlight.MedianRatio, guardInFlightMedian))
	}
	return out
}
