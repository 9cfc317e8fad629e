package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentworker/agentworker/api"
)

func TestRequireToken(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics") })
	tests := []struct {
		name, token, header string
		want                int
	}{
		{"Unset", "", "", http.StatusOK},
		{"UnsetIgnoresHeader", "", "Bearer whatever", http.StatusOK},
		{"Right", "s3cret-metrics", "Bearer s3cret-metrics", http.StatusOK},
		{"SchemeAnyCase", "s3cret-metrics", "bearer s3cret-metrics", http.StatusOK},
		{"Missing", "s3cret-metrics", "", http.StatusUnauthorized},
		{"Wrong", "s3cret-metrics", "Bearer s3cret-metricz", http.StatusUnauthorized},
		{"Prefix", "s3cret-metrics", "Bearer s3cret", http.StatusUnauthorized},
		{"NotBearer", "s3cret-metrics", "Basic s3cret-metrics", http.StatusUnauthorized},
		{"Bare", "s3cret-metrics", "s3cret-metrics", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", "/metrics", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			w := httptest.NewRecorder()
			api.RequireToken(tt.token, ok).ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d", w.Code, tt.want)
			}
			if tt.want == http.StatusUnauthorized {
				if code := errorCode(t, reply{w.Code, w.Header(), w.Body.Bytes()}); code != api.CodeUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
					t.Errorf("refusal %s, WWW-Authenticate %q", w.Body, w.Header().Get("WWW-Authenticate"))
				}
			} else if w.Body.String() != "metrics" {
				t.Errorf("body %q", w.Body)
			}
		})
	}
}
