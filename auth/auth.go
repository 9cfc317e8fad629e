// Package auth verifies the bearer tokens of agentworker's HTTP endpoints,
// the way Supabase does: an HS256 JWT signed with JWT_SECRET, carried in
// "Authorization: Bearer …" or, on the event streams only (browsers'
// EventSource cannot set headers), in the access_token query parameter.
package auth

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	// ErrUnauthenticated: no token, or one that is malformed, expired or
	// signed with another key. Package api answers it 401.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: a valid token that may not read the resource. Package
	// api answers it 403.
	ErrForbidden = errors.New("forbidden")
)

// RoleService may read every project (Supabase's service_role).
const RoleService = "service_role"

// Claims are the claims agentworker reads from a token.
type Claims struct {
	// Role is "service_role" for full access; anything else is limited to Projects.
	Role string `json:"role,omitempty"`
	// Projects lists the project ids the bearer may read.
	Projects []string `json:"projects,omitempty"`
	jwt.RegisteredClaims

	fingerprint [sha256.Size]byte // of the signature of the token they were read from
}

// Fingerprint identifies the token the claims were verified from (the
// SHA-256 of its decoded signature, which no other encoding of the token
// changes), to count what one token holds open without keeping the token.
func (c Claims) Fingerprint() [sha256.Size]byte { return c.fingerprint }

// CanAccess reports whether the claims allow access to a project.
func (c Claims) CanAccess(projectID string) bool {
	return c.Role == RoleService || slices.Contains(c.Projects, projectID)
}

// DefaultMaxTTL is the longest a token may live unless WithMaxTTL says
// otherwise, for project and service tokens alike.
const DefaultMaxTTL = 24 * time.Hour

// clockSkew is how far the clock of the backend that minted a token may be
// ahead of ours: a token issued (iat) later than now plus clockSkew is
// refused.
const clockSkew = time.Minute

// Verifier checks tokens signed with one HS256 secret.
type Verifier struct {
	secret        []byte
	now           func() time.Time
	maxTTL        time.Duration // of a token limited to projects
	serviceMaxTTL time.Duration // of a service_role token
}

// NewVerifier returns a Verifier for secret. now defaults to time.Now;
// tokens live at most DefaultMaxTTL.
func NewVerifier(secret string, now func() time.Time) (*Verifier, error) {
	if len(secret) < 16 {
		return nil, errors.New("auth: JWT_SECRET must be at least 16 bytes")
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{secret: []byte(secret), now: now, maxTTL: DefaultMaxTTL, serviceMaxTTL: DefaultMaxTTL}, nil
}

// WithMaxTTL returns a copy of v that accepts a project token living at most
// project, a service_role token at most service. A value that is not
// positive keeps the current ceiling.
func (v *Verifier) WithMaxTTL(project, service time.Duration) *Verifier {
	c := *v
	if project > 0 {
		c.maxTTL = project
	}
	if service > 0 {
		c.serviceMaxTTL = service
	}
	return &c
}

// Verify parses and checks a token: HS256 only, every segment in canonical
// base64 (the trailing bits of a signature's last character would otherwise
// make one token many strings), signature, exp required and a JSON number
// (as are iat and nbf), nbf not after now, iat not after now plus
// clockSkew (a token issued in the future would outlive a revocation), and
// a lifetime within the ceiling of its role, counted from now and from its
// iat: a leaked token works for a day at most, not for ever.
func (v *Verifier) Verify(token string) (Claims, error) {
	var c Claims
	parsed, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(v.now),
	)
	if err == nil {
		err = numericDates(parsed)
	}
	if err == nil {
		err = v.checkLifetime(c)
	}
	if err != nil {
		// The reason stays server-side; callers answer a bare 401.
		return Claims{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	c.fingerprint = sha256.Sum256(parsed.Signature)
	return c, nil
}

// numericDates refuses a token whose exp, iat or nbf is not a JSON number:
// the JWT library also reads a number written as a string.
func numericDates(t *jwt.Token) error {
	parts := strings.Split(t.Raw, ".")
	if len(parts) != 3 {
		return errors.New("token is not three segments")
	}
	payload, err := jwt.NewParser().DecodeSegment(parts[1])
	if err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	var dates struct {
		Exp, Iat, Nbf json.RawMessage
	}
	if err := json.Unmarshal(payload, &dates); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	for name, raw := range map[string]json.RawMessage{"exp": dates.Exp, "iat": dates.Iat, "nbf": dates.Nbf} {
		if len(raw) > 0 && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return fmt.Errorf("%s is not a number", name)
		}
	}
	return nil
}

// checkLifetime refuses a token issued in the future or that lives longer
// than its role may. The JWT library refuses an nbf after now.
func (v *Verifier) checkLifetime(c Claims) error {
	if c.IssuedAt != nil {
		if ahead := c.IssuedAt.Sub(v.now()); ahead > clockSkew {
			return fmt.Errorf("token issued %s from now, more than the clock skew of %s", ahead.Round(time.Second), clockSkew)
		}
	}
	ceiling := v.maxTTL
	if c.Role == RoleService {
		ceiling = v.serviceMaxTTL
	}
	exp := c.ExpiresAt.Time
	if left := exp.Sub(v.now()); left > ceiling+clockSkew {
		return fmt.Errorf("token expires in %s, more than the %s a %s token may live", left.Round(time.Second), ceiling, roleName(c))
	}
	if c.IssuedAt != nil {
		if life := exp.Sub(c.IssuedAt.Time); life > ceiling+clockSkew {
			return fmt.Errorf("token lives %s, more than the %s a %s token may live", life, ceiling, roleName(c))
		}
	}
	return nil
}

func roleName(c Claims) string {
	if c.Role == RoleService {
		return "service"
	}
	return "project"
}

// FromRequest verifies the request's token, from the Authorization header
// only: a token in a URL can be planted in a link or a form, and a browser
// sends a cross-origin request with a header only after a preflight.
func (v *Verifier) FromRequest(r *http.Request) (Claims, error) {
	return v.fromRequest(r, "")
}

// FromStreamRequest verifies the token of a request for an event stream,
// from the Authorization header or else the access_token query parameter,
// the one place EventSource can carry it.
func (v *Verifier) FromStreamRequest(r *http.Request) (Claims, error) {
	return v.fromRequest(r, r.URL.Query().Get("access_token"))
}

func (v *Verifier) fromRequest(r *http.Request, token string) (Claims, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return Claims{}, fmt.Errorf("%w: authorization header is not a bearer token", ErrUnauthenticated)
		}
		token = strings.TrimSpace(rest)
	}
	if token == "" {
		return Claims{}, fmt.Errorf("%w: no token", ErrUnauthenticated)
	}
	return v.Verify(token)
}

// Authorize verifies the request's token and checks it may access projectID.
func (v *Verifier) Authorize(r *http.Request, projectID string) (Claims, error) {
	c, err := v.FromRequest(r)
	if err != nil {
		return Claims{}, err
	}
	if !c.CanAccess(projectID) {
		return c, fmt.Errorf("%w: token may not access project %s", ErrForbidden, projectID)
	}
	return c, nil
}

// Sign issues a token for claims; for tests, the CLI and trusted backends.
func (v *Verifier) Sign(c Claims) (string, error) {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(v.secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}
