package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentworker/agentworker/metrics"
	"github.com/agentworker/agentworker/sandbox"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// TestMetricsToken: with METRICS_TOKEN set, /metrics wants it as a bearer
// token; unset, /metrics is open. Health stays open either way.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	st, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends the handlers' event hubs
	tests := []struct {
		name, token, path, header string
		want                      int
	}{
		{"UnsetOpen", "", "/metrics", "", http.StatusOK},
		{"SetNoHeader", "scrape-token-123", "/metrics", "", http.StatusUnauthorized},
		{"SetWrong", "scrape-token-123", "/metrics", "Bearer scrape-token-124", http.StatusUnauthorized},
		{"SetRight", "scrape-token-123", "/metrics", "Bearer scrape-token-123", http.StatusOK},
		{"SetHealthOpen", "scrape-token-123", "/healthz", "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := httpHandler(ctx, config{MetricsToken: tt.token}, slog.New(slog.DiscardHandler), pool, st, nil, m, "on", nil)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", tt.path, nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("GET %s: status %d, want %d (%s)", tt.path, w.Code, tt.want, w.Body)
			}
			if tt.want == http.StatusOK && tt.path == "/metrics" && !strings.Contains(w.Body.String(), "agentworker_queue_depth") {
				t.Errorf("/metrics served %q", w.Body)
			}
		})
	}
}

// TestReadyzSaysWhetherCommandsAreOn: /readyz answers ready either way and
// says whether run_command is on, and why not, and the limits of its
// sandboxes when it is.
func TestReadyzSaysWhetherCommandsAreOn(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	st, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.New(t, sandbox.Config{})
	for _, tc := range []struct {
		sb       *sandbox.Sandbox
		commands string
		want     string
	}{
		{sb, "on", "ready\nrun_command: on\nsandbox_limits: " + sb.Limits() + "\n"},
		{nil, "off: the sandbox cannot start on this host: sandbox unavailable: bubblewrap (bwrap) not found",
			"ready\nrun_command: off: the sandbox cannot start on this host: sandbox unavailable: bubblewrap (bwrap) not found\n"},
	} {
		w := httptest.NewRecorder()
		healthMux(pool, st, readiness(tc.sb, tc.commands)).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		if w.Code != http.StatusOK || w.Body.String() != tc.want {
			t.Errorf("/readyz: %d %q, want %q", w.Code, w.Body, tc.want)
		}
	}
	if !strings.Contains(sb.Limits(), "per process: data 2048 MiB") {
		t.Errorf("limits: %s", sb.Limits())
	}
}

// TestAuditRefusalsPerMinute: AUDIT_REFUSALS_PER_MINUTE sets how many of
// one actor's refused requests a minute the API records in audit_log.
func TestAuditRefusalsPerMinute(t *testing.T) {
	clearEnv(t)
	t.Setenv("AUDIT_REFUSALS_PER_MINUTE", "3")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, cfg)
	const sent = 7
	for range sent {
		req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+e.addr+"/v1/projects/"+uuid.NewString()+"/tasks", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer not-a-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a bad token: status %d, want 401", resp.StatusCode)
		}
	}
	recs, err := agentsql.AuditLog(t.Context(), e.pool, "anonymous")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d refusals recorded of %d sent, want AUDIT_REFUSALS_PER_MINUTE's 3", len(recs), sent)
	}
}
