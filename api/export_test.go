package api

import (
	"strings"
	"time"
)

// Route is a row of the route table, for tests outside the package.
type Route struct {
	Method, Path string
	Scope        string // "project", "task", "inbox" or "agent": what {id} names
	Stream       bool   // an event stream, which EventSource opens
}

// Routes returns the route table of a.
func Routes(a *API) []Route {
	var out []Route
	for _, rt := range a.routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		out = append(out, Route{Method: method, Path: path, Scope: [...]string{"project", "task", "inbox", "agent"}[rt.scope], Stream: rt.stream})
	}
	return out
}

// RefusalLimiter returns the audit log's per-actor allowance as a function.
func RefusalLimiter(perMinute int) func(key string, now time.Time) (suppressed int, record bool) {
	l := &refusalLimiter{perMinute: perMinute, actors: map[string]*refusalWindow{}}
	return l.take
}
