package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/agentworker/agentworker/llm"
)

func TestIsTransient(t *testing.T) {
	t.Parallel()

	apiErr := func(status int) error {
		return fmt.Errorf("complete: %w", &llm.APIError{StatusCode: status, Transient: status == 429 || status >= 500})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "Nil", err: nil, want: false},
		{name: "RateLimited", err: apiErr(http.StatusTooManyRequests), want: true},
		{name: "InternalServerError", err: apiErr(http.StatusInternalServerError), want: true},
		{name: "BadGateway", err: apiErr(http.StatusBadGateway), want: true},
		{name: "BadRequest", err: apiErr(http.StatusBadRequest), want: false},
		{name: "Unauthorized", err: apiErr(http.StatusUnauthorized), want: false},
		{name: "Forbidden", err: apiErr(http.StatusForbidden), want: false},
		{name: "NotFound", err: apiErr(http.StatusNotFound), want: false},
		{name: "UnprocessableEntity", err: apiErr(http.StatusUnprocessableEntity), want: false},
		{name: "Canceled", err: fmt.Errorf("complete: %w", context.Canceled), want: false},
		{name: "CanceledWrappingTransient", err: fmt.Errorf("%w: %w", context.Canceled, io.ErrUnexpectedEOF), want: false},
		{name: "DeadlineExceeded", err: fmt.Errorf("complete: %w", context.DeadlineExceeded), want: true},
		{name: "UnexpectedEOF", err: fmt.Errorf("read: %w", io.ErrUnexpectedEOF), want: true},
		{name: "ConnectionRefused", err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, want: true},
		{name: "Unknown", err: errors.New("something else"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := llm.IsTransient(tt.err); got != tt.want {
				t.Errorf("IsTransient(%v) = %t, want %t", tt.err, got, tt.want)
			}
		})
	}
}

func TestAPIErrorError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		err  llm.APIError
		want string
	}{
		{
			name: "Full",
			err:  llm.APIError{StatusCode: 429, Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: "slow down"},
			want: "api error: status 429 rate_limit_error (rate_limit_exceeded): slow down",
		},
		{name: "StatusOnly", err: llm.APIError{StatusCode: 502}, want: "api error: status 502"},
		{name: "InStream", err: llm.APIError{Type: "server_error", Message: "overloaded"}, want: "api error in stream server_error: overloaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConnectionErrorIsTransient(t *testing.T) {
	t.Parallel()

	// Listen and close at once to get a port that refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	client, err := llm.New(llm.Config{BaseURL: "http://" + addr + "/v1", Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	_, err = client.Complete(t.Context(), userRequest("hi"))
	if err == nil {
		t.Fatal("complete succeeded against a closed port")
	}
	if !llm.IsTransient(err) {
		t.Errorf("IsTransient(%v) = false, want true", err)
	}
}
