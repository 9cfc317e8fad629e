package llm

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		wantOK  bool
	}{
		{name: "Seconds", headers: map[string]string{"Retry-After": "7"}, want: 7 * time.Second, wantOK: true},
		{name: "Milliseconds", headers: map[string]string{"retry-after-ms": "250", "Retry-After": "1"}, want: 250 * time.Millisecond, wantOK: true},
		{name: "HTTPDate", headers: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second, wantOK: true},
		{name: "ExhaustedRequests", headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, want: 6 * time.Minute, wantOK: true},
		{name: "ExhaustedTokensSeconds", headers: map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5"}, want: 1500 * time.Millisecond, wantOK: true},
		{name: "RemainingLeft", headers: map[string]string{"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "20ms"}},
		{name: "Nothing", headers: map[string]string{}},
		{name: "Garbage", headers: map[string]string{"Retry-After": "soon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got, ok := retryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryAfter = %s, %t; want %s, %t", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestReadLimits(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "1200")
	h.Set("x-ratelimit-limit-tokens", "60000")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "60s")
	l := readLimits(h, time.Now())
	// 1,200 a minute: one request back every 50 ms.
	if l.rpm != 1200 || l.tpm != 60000 || !l.exhausted || l.until != 50*time.Millisecond {
		t.Errorf("limits = %+v, want 1200 rpm, 60000 tpm, exhausted for 50ms", l)
	}
}
