package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

var (
	// ErrNoChoices is returned when the endpoint answered without any choice.
	ErrNoChoices = errors.New("answer has no choices")
	// ErrNoImage is returned when the images endpoint answered without
	// picture data.
	ErrNoImage = errors.New("answer has no image data")
)

// APIError is an error the endpoint answered with, returned once openai-go's
// retries are exhausted (or at once when the status is not retryable).
//
// StatusCode is 0 for an error event received in the middle of a stream.
// Message is the endpoint's own text with the API key removed; the error
// never carries request headers.
type APIError struct {
	StatusCode int
	Type       string
	Code       string
	Message    string
	// Transient is true when the same request may succeed later: rate
	// limits (429), timeouts (408), conflicts (409), server errors (5xx) and
	// errors reported in the middle of a stream.
	Transient bool
}

// Error returns the status, type, code and message of the error.
func (e *APIError) Error() string {
	var b strings.Builder
	if e.StatusCode == 0 {
		b.WriteString("api error in stream")
	} else {
		fmt.Fprintf(&b, "api error: status %d", e.StatusCode)
	}
	if e.Type != "" {
		b.WriteString(" ")
		b.WriteString(e.Type)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// transientStatus reports whether a response status is worth retrying; it
// matches the statuses openai-go retries by itself.
func transientStatus(status int) bool {
	return status == http.StatusRequestTimeout ||
		status == http.StatusConflict ||
		status == http.StatusTooManyRequests ||
		status >= http.StatusInternalServerError
}

// IsTransient reports whether err is worth retrying later: rate limits,
// server errors, timeouts (including a context deadline), dropped
// connections and truncated answers. It is false for nil, for cancellation
// (context.Canceled), for client errors such as 400, 401, 403, 404 and 422,
// and for errors it does not recognise.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Transient
	}
	var busy *RateLimitError
	if errors.As(err, &busy) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// redact removes secret from s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}
