package tools_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func TestGenerateImage(t *testing.T) {
	t.Parallel()
	imageClient := func(t *testing.T, opts ...llmtest.Option) *llm.Client {
		t.Helper()
		srv := llmtest.NewWith(t, scripted.Queue(), opts...)
		cfg := srv.Config()
		cfg.MaxRetries = -1
		c, err := llm.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("WritesThePNG", func(t *testing.T) {
		t.Parallel()
		reg, env := setup(t, nil)
		env.Images = imageClient(t)
		r := reg.Call(t.Context(), env, "generate_image", args(map[string]any{"prompt": "a red fox", "path": "public/fox.png"}))
		if !r.Success {
			t.Fatalf("generate_image: %s", r.Output)
		}
		got, info, err := env.Store.Read(t.Context(), "p", "public/fox.png")
		want, _ := scripted.Picture("a red fox")
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("public/fox.png = %d bytes, %v; want the picture", len(got), err)
		}
		if len(r.Changes) != 1 {
			t.Fatalf("changes = %+v", r.Changes)
		}
		c := r.Changes[0]
		if c.Path != "public/fox.png" || c.Op != events.OpCreate || c.MimeType != "image/png" || c.FileSize != info.Size {
			t.Errorf("file_update = %+v", c)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			args     map[string]any
			images   bool
			status   int
			wantErr  string
			wantHint string
		}{
			{name: "NotPNG", args: map[string]any{"prompt": "x", "path": "a.jpg"}, images: true, wantErr: "must end in .png"},
			{name: "BadSize", args: map[string]any{"prompt": "x", "path": "a.png", "size": "10x10"}, images: true, wantErr: "is not one of"},
			{name: "NoImageModel", args: map[string]any{"prompt": "x", "path": "a.png"}, wantErr: "no image model", wantHint: "placeholder"},
			{name: "ContentPolicy", args: map[string]any{"prompt": "x", "path": "a.png"}, images: true, status: http.StatusBadRequest,
				wantErr: "refused the request: nope", wantHint: "change the prompt"},
			{name: "Unavailable", args: map[string]any{"prompt": "x", "path": "a.png"}, images: true, status: http.StatusServiceUnavailable,
				wantErr: "unavailable right now", wantHint: "continue with the rest"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				reg, env := setup(t, nil)
				if tt.images {
					env.Images = imageClient(t, llmtest.Images(func(*scripted.ImageRequest) scripted.Reply {
						return scripted.Reply{Status: tt.status, ErrorMessage: "nope"}
					}))
				}
				r := reg.Call(t.Context(), env, "generate_image", args(tt.args))
				var out struct {
					Error string `json:"error"`
					Hint  string `json:"hint"`
				}
				_ = json.Unmarshal([]byte(r.Output), &out)
				if r.Success || !strings.Contains(out.Error, tt.wantErr) || !strings.Contains(out.Hint, tt.wantHint) {
					t.Errorf("result = %s; want error %q, hint %q", r.Output, tt.wantErr, tt.wantHint)
				}
				if files, _ := env.Store.List(t.Context(), "p", ""); len(files) != 0 {
					t.Errorf("a refused generation wrote %v", files)
				}
			})
		}
	})

	t.Run("NotForChat", func(t *testing.T) {
		t.Parallel()
		reg, err := tools.ForTaskType("chat")
		if err != nil {
			t.Fatal(err)
		}
		if reg.Has("generate_image") {
			t.Error("chat tasks may generate images")
		}
	})
}
