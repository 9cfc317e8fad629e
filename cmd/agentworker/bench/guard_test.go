package bench

import (
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	good := Report{
		EventReceiptMS: Percentiles{P99: 9}, SSEReceiptMS: Percentiles{P99: 12},
		LatencyMS: Percentiles{P50: 3}, RiverLatencyMS: Percentiles{P50: 2},
		InFlight: InFlight{MedianRatio: 1.2},
	}
	for _, tt := range []struct {
		name string
		bad  func(*Report)
		want string
	}{
		{"ListenReceipt", func(r *Report) { r.EventReceiptMS.P99 = 51 }, "LISTEN receipt p99 51.0 ms"},
		{"SSEReceipt", func(r *Report) { r.SSEReceiptMS.P99 = 80 }, "SSE receipt p99 80.0 ms"},
		{"Pickup", func(r *Report) { r.LatencyMS.P50 = 4.1 }, "over 2× tuned River's 2.00 ms"},
		{"InFlight", func(r *Report) { r.InFlight.MedianRatio = 2.5 }, "median 2.50× the ideal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := good
			tt.bad(&r)
			if got := Guard(r); len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Errorf("Guard = %q, want one saying %q", got, tt.want)
			}
		})
	}
	if got := Guard(good); len(got) != 0 {
		t.Errorf("Guard of a good run = %q, want none", got)
	}
	if got := Guard(Report{}); len(got) != 0 {
		t.Errorf("Guard of a run of no guarded scenario = %q, want none", got)
	}
}
