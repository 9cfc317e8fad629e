package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// retention is how long something is kept: a Go duration ("720h"), a
// number of days ("30d"), or "keep" / "0": for ever.
type retention time.Duration

// Decode implements envconfig.Decoder.
func (r *retention) Decode(v string) error {
	v = strings.TrimSpace(v)
	switch {
	case v == "keep" || v == "0" || v == "":
		*r = 0
		return nil
	case strings.HasSuffix(v, "d"):
		days, err := strconv.Atoi(strings.TrimSuffix(v, "d"))
		if err != nil || days < 1 {
			return fmt.Errorf("%q is not a number of days (e.g. 30d)", v)
		}
		*r = retention(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither keep, a number of days (30d) nor a duration (720h)", v)
	}
	if d > 0 && d < time.Hour {
		return fmt.Errorf("%q is shorter than an hour", v)
	}
	*r = retention(d)
	return nil
}
