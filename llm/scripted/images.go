package scripted

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"slices"
	"time"
)

// ImageRequest is a decoded Images API generation request
// (POST /v1/images/generations) as the server received it.
type ImageRequest struct {
	Model          string `json:"model"`
	Prompt         string `json:"prompt"`
	Size           string `json:"size"`
	N              int    `json:"n"`
	ResponseFormat string `json:"response_format"`
	OutputFormat   string `json:"output_format"`
	// Header holds the request's HTTP headers, Authorization included.
	Header http.Header `json:"-"`
	// Body is the raw request body.
	Body []byte `json:"-"`
}

// ImageSide is the width and height of the pictures the server returns,
// whatever size was asked for: small, so tests stay fast.
const ImageSide = 8

// ImageRequests returns every image request received so far, in arrival
// order, including rejected ones.
func (s *Server) ImageRequests() []ImageRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.imageRequests)
}

// serveImages answers one image generation request with a PNG, or with the
// error the ImageResponder chose.
func (s *Server) serveImages(ctx context.Context, w http.ResponseWriter, body []byte, header http.Header) {
	var req ImageRequest
	decodeErr := json.Unmarshal(body, &req)
	req.Header, req.Body = header, body
	if !s.DiscardRequests {
		s.mu.Lock()
		s.imageRequests = append(s.imageRequests, req)
		s.mu.Unlock()
	}
	switch {
	case decodeErr != nil:
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("decode request body: %v", decodeErr))
		return
	case req.Prompt == "":
		writeError(w, http.StatusBadRequest, "", "prompt is required")
		return
	}
	if s.ImageResponder != nil {
		reply := s.ImageResponder(&req)
		if reply.Delay > 0 {
			timer := time.NewTimer(reply.Delay)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		if reply.Status != 0 {
			writeError(w, reply.Status, reply.RetryAfter, reply.ErrorMessage)
			return
		}
	}
	pic, err := Picture(req.Prompt)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	now := s.now()
	writeJSON(w, http.StatusOK, map[string]any{
		"created":       now.Unix(),
		"data":          []map[string]any{{"b64_json": base64.StdEncoding.EncodeToString(pic)}},
		"output_format": "png",
		"size":          fmt.Sprintf("%dx%d", ImageSide, ImageSide),
	})
}

// Picture returns the PNG the server answers prompt with: ImageSide pixels
// square, in a colour derived from the prompt.
func Picture(prompt string) ([]byte, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(prompt))
	sum := h.Sum32()
	img := image.NewNRGBA(image.Rect(0, 0, ImageSide, ImageSide))
	c := color.NRGBA{R: byte(sum), G: byte(sum >> 8), B: byte(sum >> 16), A: 0xff}
	for y := range ImageSide {
		for x := range ImageSide {
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode picture: %w", err)
	}
	return buf.Bytes(), nil
}
