package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"path"
	"slices"
	"strings"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/storage"
)

// ImageGenerator makes a PNG picture from a prompt; *llm.Client is one.
type ImageGenerator interface {
	GenerateImage(ctx context.Context, prompt, size string) ([]byte, error)
}

// imageSizes are the sizes generate_image accepts.
var imageSizes = []string{"1024x1024", "1536x1024", "1024x1536", "auto"}

// maxPromptBytes bounds an image prompt (the API's limit for GPT image models).
const maxPromptBytes = 32000

func generateImageTool() Tool {
	return Tool{
		Name: "generate_image",
		Description: "Generate a PNG picture from a description and save it in the project at path (which must end in .png). " +
			"Use it for images the app needs (logos, illustrations, backgrounds), then reference the file from the code.",
		Parameters: schema([]string{"prompt", "path"}, map[string]any{
			"prompt": str("What the picture shows: subject, style, colours, composition."),
			"path":   str("Where to save it, relative to the project root, ending in .png, e.g. public/hero.png."),
			"size":   map[string]any{"type": "string", "enum": imageSizes, "description": "Width x height in pixels (default 1024x1024)."},
		}),
		Access: Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Prompt string `json:"prompt"`
				Path   string `json:"path"`
				Size   string `json:"size"`
			}
			if r := decode("generate_image", raw, &args); r != nil {
				return *r
			}
			switch {
			case strings.TrimSpace(args.Prompt) == "":
				return Fail("generate_image: prompt is empty", "describe the picture")
			case len(args.Prompt) > maxPromptBytes:
				return Fail(fmt.Sprintf("generate_image: prompt is %d bytes, over the %d byte limit", len(args.Prompt), maxPromptBytes), "shorten the description")
			}
			p, err := storage.CleanPath(args.Path)
			if err != nil {
				return storageFail("generate_image", args.Path, err)
			}
			if strings.ToLower(path.Ext(p)) != ".png" {
				return Fail("generate_image: path must end in .png: "+p, "pictures are saved as PNG")
			}
			size := args.Size
			if size == "" {
				size = imageSizes[0]
			}
			if !slices.Contains(imageSizes, size) {
				return Fail(fmt.Sprintf("generate_image: size %q is not one of %s", size, strings.Join(imageSizes, ", ")), "")
			}
			if env.Images == nil {
				return Fail("generate_image: no image model is configured for this worker", "continue without the picture, or use a placeholder (an SVG or CSS) instead")
			}
			pic, err := env.Images.GenerateImage(ctx, args.Prompt, size)
			if err != nil {
				return imageFail(err)
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(pic))
			if err != nil {
				return Fail(fmt.Sprintf("generate_image: the image model answered with %d bytes that are not a PNG: %v", len(pic), err), "try again, or continue without the picture")
			}
			info, created, err := storage.Upsert(ctx, env.Store, env.ProjectID, p, pic)
			if err != nil {
				return storageFail("generate_image", p, err)
			}
			op := events.OpUpdate
			if created {
				op = events.OpCreate
			}
			summary := fmt.Sprintf("generated %s (%dx%d PNG, %d bytes)", p, cfg.Width, cfg.Height, info.Size)
			r := OK(summary, map[string]any{"path": p, "op": op, "bytes": info.Size, "width": cfg.Width, "height": cfg.Height, "mimeType": "image/png"})
			r.Changes = []events.FileUpdate{{Path: p, Op: op, Summary: summary, FileSize: info.Size, MimeType: "image/png"}}
			return r
		},
	}
}

// imageFail tells the model what it can do about a failed generation.
func imageFail(err error) Result {
	var api *llm.APIError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Fail("generate_image: "+err.Error(), "")
	case errors.As(err, &api) && !api.Transient:
		extra := map[string]any{"status": api.StatusCode}
		return FailWith("generate_image: the image model refused the request: "+api.Message,
			"change the prompt (it may break the content policy) or the size; or continue without the picture", extra)
	case llm.IsTransient(err):
		return Fail("generate_image: the image model is unavailable right now: "+err.Error(),
			"continue with the rest of the task; you may try once more later, or use a placeholder")
	}
	return Fail("generate_image: "+err.Error(), "continue without the picture, or use a placeholder")
}
