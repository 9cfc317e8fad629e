package main

import (
	"testing"
	"time"
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
