package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/redact"
	agentsql "github.com/agentworker/agentworker/sql"
)

// refusalReason says why err refused the request, when it is a refusal the
// audit log keeps: no valid token, a resource outside the token, a
// sensitive file, an illegal transition. Other failures are not audited.
func refusalReason(err error) (string, bool) {
	var ae *apiError
	switch {
	case errors.Is(err, auth.ErrUnauthenticated), errors.Is(err, auth.ErrForbidden):
		return err.Error(), true
	case errors.As(err, &ae) && (ae.status == http.StatusUnauthorized || ae.status == http.StatusForbidden || ae.code == CodeIllegal):
		return ae.code + ": " + ae.message, true
	}
	return "", false
}

// auditRefusal records a refused request in audit_log, unless its actor
// is past its allowance this minute: a flood cannot fill the table. A
// bearer without a valid token is "anonymous", counted by remote address.
func (a *API) auditRefusal(r *http.Request, pattern string, claims *auth.Claims, err error) {
	reason, ok := refusalReason(err)
	if !ok {
		return
	}
	host, _, splitErr := net.SplitHostPort(r.RemoteAddr)
	if splitErr != nil {
		host = r.RemoteAddr
	}
	who, key := "anonymous", "anonymous@"+host
	if claims != nil {
		who = actor(*claims)
		key = who
	}
	suppressed, record := a.refusals.take(key, time.Now())
	if !record {
		return
	}
	// The answer does not wait on a client that went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
	defer cancel()
	if err := agentsql.RecordRefusal(ctx, a.pool, agentsql.Refusal{Actor: who, Action: pattern, Resource: bounded(r.URL.Path),
		Reason: bounded(redact.String(reason)), RemoteAddr: host, Suppressed: suppressed}); err != nil {
		a.cfg.Logger.ErrorContext(ctx, "audit refusal", "err", err)
	}
}

// refusalLimiter allows each actor perMinute audit records a minute and
// counts the rest, reported with the actor's next record.
type refusalLimiter struct {
	perMinute int

	mu     sync.Mutex
	actors map[string]*refusalWindow
}

type refusalWindow struct {
	start      time.Time
	recorded   int
	suppressed int
}

// maxRefusalActors bounds the actors tracked; past it the windows start over.
const maxRefusalActors = 10000

// take reports whether key's refusal at now is recorded, and how many of
// its refusals were left out before it.
func (l *refusalLimiter) take(key string, now time.Time) (suppressed int, record bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.actors[key]
	if w == nil {
		if len(l.actors) >= maxRefusalActors {
			clear(l.actors)
		}
		w = &refusalWindow{start: now}
		l.actors[key] = w
	}
	if now.Sub(w.start) >= time.Minute {
		w.start, w.recorded = now, 0
	}
	if w.recorded >= l.perMinute {
		w.suppressed++
		return 0, false
	}
	w.recorded++
	suppressed, w.suppressed = w.suppressed, 0
	return suppressed, true
}
