package auth_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
