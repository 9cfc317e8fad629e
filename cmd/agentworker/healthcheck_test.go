package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthzURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, want string
	}{
		{":8080", "http://127.0.0.1:8080/healthz"},
		{"0.0.0.0:9000", "http://127.0.0.1:9000/healthz"},
		{"[::]:8080", "http://127.0.0.1:8080/healthz"},
		{"127.0.0.1:8081", "http://127.0.0.1:8081/healthz"},
		{"[::1]:8080", "http://[::1]:8080/healthz"},
		{"localhost:8080", "http://localhost:8080/healthz"},
	} {
		got, err := healthzURL(tc.addr)
		if err != nil || got != tc.want {
			t.Errorf("healthzURL(%q) = %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
	if _, err := healthzURL("8080"); err == nil || !strings.Contains(err.Error(), `HTTP_ADDR "8080"`) {
		t.Errorf("healthzURL(8080): %v, want an error naming HTTP_ADDR", err)
	}
}

// TestHealthcheck: the subcommand succeeds against serve's health routes
// and fails, naming the URL, when the server is unhealthy or not there.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name    string
		handler http.Handler // nil: nothing listens
		wantErr string
	}{
		{"Serving", healthMux(nil, nil, "on"), ""},
		{"Unhealthy", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}), "503 Service Unavailable"},
		{"NotListening", nil, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := closedAddr
			if tc.handler != nil {
				srv := httptest.NewServer(tc.handler)
				t.Cleanup(srv.Close)
				addr = srv.Listener.Addr().String()
			}
			var out bytes.Buffer
			err := healthcheck(t.Context(), config{HTTPAddr: addr}, &out)
			url := "http://" + addr + "/healthz"
			if tc.wantErr == "" {
				if err != nil || out.String() != "healthy: "+url+"\n" {
					t.Fatalf("healthcheck: %v, printed %q", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), url) {
				t.Fatalf("healthcheck: %v; want an error naming %s and %q", err, url, tc.wantErr)
			}
		})
	}
}
