package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// RequireToken serves h only to requests carrying "Authorization: Bearer
// <token>" (what Prometheus sends with its bearer_token settings), and
// answers the rest 401 in the API's error body. An empty token leaves h
// open. The comparison takes the same time whatever the bearer sent: both
// sides are hashed first, so neither the content nor the length leaks.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentworker"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "unauthorized")
			return
		}
		h.ServeHTTP(w, r)
	})
}
