package auth_test

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentworker/agentworker/auth"
)

const secret = "test-secret-0123456789"

func TestAuthorize(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	other, _ := auth.NewVerifier("another-secret-0123456789", nil)
	exp := jwt.NewNumericDate(now.Add(time.Hour))
	sign := func(t *testing.T, v *auth.Verifier, c auth.Claims) string {
		t.Helper()
		s, err := v.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	projectA := "11111111-1111-1111-1111-111111111111"
	tokenA := sign(t, v, auth.Claims{Projects: []string{projectA}, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: exp}})
	none := jwt.NewWithClaims(jwt.SigningMethodNone, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: exp}})
	noneToken, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)

	tests := []struct {
		name    string
		header  string
		query   string
		project string
		want    error
	}{
		{name: "HeaderOwnProject", header: "Bearer " + tokenA, project: projectA},
		{name: "QueryRefused", query: tokenA, project: projectA, want: auth.ErrUnauthenticated}, // only streams take a query token
		{name: "OtherProject", header: "Bearer " + tokenA, project: "22222222-2222-2222-2222-222222222222", want: auth.ErrForbidden},
		{name: "ServiceRole", header: "Bearer " + sign(t, v, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: exp}}), project: "any"},
		{name: "NoToken", project: projectA, want: auth.ErrUnauthenticated},
		{name: "NotBearer", header: "Basic abc", project: projectA, want: auth.ErrUnauthenticated},
		{name: "Garbage", header: "Bearer not.a.jwt", project: projectA, want: auth.ErrUnauthenticated},
		{name: "WrongKey", header: "Bearer " + sign(t, other, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: exp}}), project: projectA, want: auth.ErrUnauthenticated},
		{name: "Expired", header: "Bearer " + sign(t, v, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(now.Add(-time.Minute))}}), project: projectA, want: auth.ErrUnauthenticated},
		{name: "NoExpiry", header: "Bearer " + sign(t, v, auth.Claims{Role: auth.RoleService}), project: projectA, want: auth.ErrUnauthenticated},
		{name: "AlgNone", header: "Bearer " + noneToken, project: projectA, want: auth.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/x?access_token="+tt.query, nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			_, err := v.Authorize(r, tt.project)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Authorize = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestFromStreamRequest: an event stream takes the token in the query
// (EventSource cannot set a header); the header wins when both are sent.
func TestFromStreamRequest(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier("0123456789abcdef0123", nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := v.Sign(auth.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "query", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/x?access_token="+tok, nil)
	if c, err := v.FromStreamRequest(r); err != nil || c.Subject != "query" {
		t.Errorf("FromStreamRequest = %+v, %v", c, err)
	}
	if _, err := v.FromRequest(r); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("FromRequest took a query token: %v", err)
	}
	r.Header.Set("Authorization", "Bearer not.a.jwt")
	if _, err := v.FromStreamRequest(r); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("FromStreamRequest with a bad header = %v, want the header to win", err)
	}
}

func TestNewVerifierRejectsShortSecret(t *testing.T) {
	t.Parallel()
	if _, err := auth.NewVerifier("short", nil); err == nil {
		t.Fatal("NewVerifier accepted a 5-byte secret")
	}
}

// TestTokenLifetime: a token lives at most its ceiling (JWT_MAX_TTL for a
// project token, JWT_SERVICE_MAX_TTL for a service token), counted from now
// and from its iat; exp, iat and nbf must be JSON numbers.
func TestTokenLifetime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	v = v.WithMaxTTL(24*time.Hour, time.Hour)
	project := []string{"11111111-1111-1111-1111-111111111111"}
	date := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	signMap := func(t *testing.T, m jwt.MapClaims) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, m).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sign := func(t *testing.T, c auth.Claims) string {
		t.Helper()
		s, err := v.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name  string
		token func(t *testing.T) string
		ok    bool
	}{
		{"ProjectDay", func(t *testing.T) string {
			return sign(t, auth.Claims{Projects: project, RegisteredClaims: jwt.RegisteredClaims{IssuedAt: date(0), ExpiresAt: date(24 * time.Hour)}})
		}, true},
		{"ProjectYear9999", func(t *testing.T) string {
			return sign(t, auth.Claims{Projects: project, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))}})
		}, false},
		{"ProjectTwoDays", func(t *testing.T) string {
			return sign(t, auth.Claims{Projects: project, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: date(48 * time.Hour)}})
		}, false},
		{"ProjectIssuedLongBefore", func(t *testing.T) string { // within a day of its end, but lives a week
			return sign(t, auth.Claims{Projects: project, RegisteredClaims: jwt.RegisteredClaims{IssuedAt: date(-7 * 24 * time.Hour), ExpiresAt: date(time.Hour)}})
		}, false},
		{"ServiceHour", func(t *testing.T) string {
			return sign(t, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{IssuedAt: date(0), ExpiresAt: date(time.Hour)}})
		}, true},
		{"ServiceDay", func(t *testing.T) string {
			return sign(t, auth.Claims{Role: auth.RoleService, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: date(24 * time.Hour)}})
		}, false},
		{"ExpNumber", func(t *testing.T) string {
			return signMap(t, jwt.MapClaims{"projects": project, "exp": now.Add(time.Hour).Unix()})
		}, true},
		{"ExpString", func(t *testing.T) string {
			return signMap(t, jwt.MapClaims{"projects": project, "exp": fmt.Sprint(now.Add(time.Hour).Unix())})
		}, false},
		{"IatString", func(t *testing.T) string {
			return signMap(t, jwt.MapClaims{"projects": project, "exp": now.Add(time.Hour).Unix(), "iat": fmt.Sprint(now.Unix())})
		}, false},
		{"NbfString", func(t *testing.T) string {
			return signMap(t, jwt.MapClaims{"projects": project, "exp": now.Add(time.Hour).Unix(), "nbf": fmt.Sprint(now.Unix())})
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := v.Verify(tt.token(t))
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, auth.ErrUnauthenticated)) {
				t.Errorf("Verify = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestTokenFromTheFuture: a token whose iat is more than a minute (the
// clock skew) after now is refused, as is one whose nbf is after now: a
// token minted in the future would otherwise outlive a revocation.
func TestTokenFromTheFuture(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	date := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	tests := []struct {
		name     string
		iat, nbf *jwt.NumericDate
		ok       bool
	}{
		{name: "IatNow", iat: date(0), ok: true},
		{name: "IatWithinSkew", iat: date(time.Minute), ok: true},
		{name: "IatPastSkew", iat: date(time.Minute + time.Second)},
		{name: "IatHalfHour", iat: date(30 * time.Minute)},
		{name: "NbfNow", nbf: date(0), ok: true},
		{name: "NbfHalfHour", iat: date(0), nbf: date(30 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := v.Sign(auth.Claims{Projects: []string{"p"}, RegisteredClaims: jwt.RegisteredClaims{
				IssuedAt: tt.iat, NotBefore: tt.nbf, ExpiresAt: date(time.Hour)}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(tok)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, auth.ErrUnauthenticated)) {
				t.Errorf("Verify = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// nonCanonical returns the token with the low bits of its signature's last
// base64 character set to low (1 to 3): the same 32 bytes decoded, another
// string.
func nonCanonical(t *testing.T, tok string, low byte) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, tok[len(tok)-1])
	if i < 0 || i&3 != 0 {
		t.Fatalf("token %q does not end in a canonical base64 character", tok)
	}
	return tok[:len(tok)-1] + string(alphabet[i|int(low)])
}

// TestNonCanonicalSignature: a token whose signature is encoded with other
// trailing bits (the same signature decoded) is refused, and the
// fingerprint of a token is its signature's, whatever its encoding.
func TestNonCanonicalSignature(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := v.Sign(auth.Claims{Projects: []string{"p"}, RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(tok[strings.LastIndexByte(tok, '.')+1:])
	if err != nil {
		t.Fatal(err)
	}
	if c.Fingerprint() != sha256.Sum256(sig) {
		t.Error("the fingerprint is not the decoded signature's")
	}
	for low := byte(1); low <= 3; low++ {
		if _, err := v.Verify(nonCanonical(t, tok, low)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("low bits %d: Verify = %v, want refused", low, err)
		}
	}
}
