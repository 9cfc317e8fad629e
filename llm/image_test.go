package llm_test

import (
	"bytes"
	"errors"
	"image/png"
	"net/http"
	"testing"
	"time"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func TestGenerateImage(t *testing.T) {
	t.Parallel()

	t.Run("ReturnsThePNG", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name       string
			model      string
			size       string
			wantModel  string
			wantFormat string // response_format
			wantOutput string // output_format
		}{
			{name: "DefaultModel", size: "1024x1024", wantModel: llm.DefaultImageModel, wantOutput: "png"},
			{name: "DallE", model: "dall-e-3", size: "1024x1024", wantModel: "dall-e-3", wantFormat: "b64_json"},
			{name: "DefaultSize", model: "gpt-image-1", wantModel: "gpt-image-1", wantOutput: "png"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				srv := llmtest.New(t)
				client := newClient(t, srv, func(c *llm.Config) { c.ImageModel = tt.model })

				pic, err := client.GenerateImage(t.Context(), "a red fox", tt.size)
				if err != nil {
					t.Fatalf("GenerateImage: %v", err)
				}
				want, _ := scripted.Picture("a red fox")
				if !bytes.Equal(pic, want) {
					t.Errorf("picture = %d bytes, want the server's %d", len(pic), len(want))
				}
				if cfg, err := png.DecodeConfig(bytes.NewReader(pic)); err != nil || cfg.Width != scripted.ImageSide {
					t.Errorf("not the PNG: %+v, %v", cfg, err)
				}
				reqs := srv.ImageRequests()
				if len(reqs) != 1 {
					t.Fatalf("%d image requests, want 1", len(reqs))
				}
				r := reqs[0]
				if r.Model != tt.wantModel || r.Prompt != "a red fox" || r.Size != tt.size || r.N != 1 ||
					r.ResponseFormat != tt.wantFormat || r.OutputFormat != tt.wantOutput {
					t.Errorf("request = %s", r.Body)
				}
			})
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name          string
			status        int
			wantTransient bool
		}{
			{name: "ContentPolicy", status: http.StatusBadRequest},
			{name: "RateLimited", status: http.StatusTooManyRequests, wantTransient: true},
			{name: "ServerError", status: http.StatusInternalServerError, wantTransient: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				srv := llmtest.NewWith(t, scripted.Queue(), llmtest.Images(func(*scripted.ImageRequest) scripted.Reply {
					return scripted.Reply{Status: tt.status, ErrorMessage: "no picture today"}
				}))
				client := newClient(t, srv, func(c *llm.Config) { c.MaxRetries, c.RateLimit.MaxWait = -1, 1500*time.Millisecond })

				_, err := client.GenerateImage(t.Context(), "a red fox", "")
				var busy *llm.RateLimitError
				if got := errors.As(err, &busy); got != (tt.status == http.StatusTooManyRequests) {
					t.Errorf("err = %v: a *RateLimitError is %t, want %t", err, got, !got)
				}
				var api *llm.APIError
				if !errors.As(err, &api) || api.StatusCode != tt.status || api.Message != "no picture today" {
					t.Fatalf("err = %v, want an *APIError with status %d", err, tt.status)
				}
				if llm.IsTransient(err) != tt.wantTransient {
					t.Errorf("IsTransient = %v, want %v", llm.IsTransient(err), tt.wantTransient)
				}
			})
		}
	})

	t.Run("RetriesTransientFailures", func(t *testing.T) {
		t.Parallel()
		calls := 0
		srv := llmtest.NewWith(t, scripted.Queue(), llmtest.Images(func(*scripted.ImageRequest) scripted.Reply {
			calls++ // the server handles one request at a time here
			if calls == 1 {
				return scripted.Reply{Status: http.StatusServiceUnavailable, RetryAfter: "0"}
			}
			return scripted.Reply{}
		}))
		client := newClient(t, srv, nil)
		if _, err := client.GenerateImage(t.Context(), "a red fox", ""); err != nil {
			t.Fatalf("GenerateImage after a 503: %v", err)
		}
		if n := len(srv.ImageRequests()); n != 2 {
			t.Errorf("%d image requests, want 2", n)
		}
	})
}
