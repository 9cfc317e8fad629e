package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

func TestGenerateImageLandsWithTheBuild(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("generate_image", m{"prompt": "a friendly fox logo", "path": "public/logo.png"}),
		call("finish", m{"summary": "added public/logo.png"}),
	}, handlers.Config{}, nil)
	id := h.insert(t, "build", "add a logo", nil)
	evs, task := h.wait(t, id)
	res := result(t, task)

	want, _ := scripted.Picture("a friendly fox logo")
	if got := h.files(t)["public/logo.png"]; got != string(want) {
		t.Fatalf("public/logo.png holds %d bytes, want the generated %d", len(got), len(want))
	}
	if len(res.FilesChanged) != 1 || res.FilesChanged[0] != (handlers.FileChange{Path: "public/logo.png", Op: events.OpCreate}) {
		t.Errorf("filesChanged = %+v", res.FilesChanged)
	}
	var update *events.FileUpdate
	for _, ev := range evs {
		if p, err := ev.Decode(); err == nil {
			if u, ok := p.(*events.FileUpdate); ok {
				update = u
			}
		}
	}
	if update == nil || update.MimeType != "image/png" || update.FileSize != int64(len(want)) || update.Path != "public/logo.png" {
		t.Errorf("file_update = %+v", update)
	}
	if reqs := h.llm.ImageRequests(); len(reqs) != 1 || reqs[0].Prompt != "a friendly fox logo" || reqs[0].Model != "gpt-image-1" {
		t.Errorf("image requests = %+v", reqs)
	}
}

func TestGenerateImageFailureIsAToolErrorTheModelActsOn(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("generate_image", m{"prompt": "a fox", "path": "public/logo.png"}),
		call("write_file", m{"path": "public/logo.svg", "content": "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n"}),
		call("finish", m{"summary": "used an SVG placeholder: the image model was down"}),
	}, handlers.Config{}, nil, llmtest.Images(func(*scripted.ImageRequest) scripted.Reply {
		return scripted.Reply{Status: http.StatusServiceUnavailable, ErrorMessage: "overloaded"}
	}))
	id := h.insert(t, "build", "add a logo", nil)
	_, task := h.wait(t, id)
	result(t, task)
	files := h.files(t)
	if _, ok := files["public/logo.png"]; ok || files["public/logo.svg"] == "" {
		t.Errorf("files = %v", files)
	}
	// The model was told what failed and what it can do instead.
	reqs := h.llm.Requests()
	var out struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
		Hint    string `json:"hint"`
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if err := json.Unmarshal([]byte(last.Content), &out); err != nil || out.Success ||
		!strings.Contains(out.Error, "unavailable") || !strings.Contains(out.Error, "overloaded") || !strings.Contains(out.Hint, "placeholder") {
		t.Errorf("tool output = %s", last.Content)
	}
}

// A fast tool's tool_start is written with its result, in one statement; a
// slow one's is written while it runs, so a timeline shows it running. The
// delay is a second here, not the default 50 ms, so that list_files on a
// loaded machine still counts as fast.
func TestToolStartWrittenWhileASlowToolRuns(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("list_files", m{}),
		call("generate_image", m{"prompt": "a slow fox", "path": "public/logo.png"}),
		call("finish", m{"summary": "added public/logo.png"}),
	}, handlers.Config{ToolStartDelay: time.Second}, nil, llmtest.Images(func(*scripted.ImageRequest) scripted.Reply {
		return scripted.Reply{Delay: 3 * time.Second}
	}))
	id := h.insert(t, "build", "add a logo", nil)
	evs, _ := h.wait(t, id)
	starts := map[string]events.Event{}
	for _, ev := range evs {
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		pr, ok := p.(*events.Progress)
		if !ok {
			continue
		}
		switch pr.Kind {
		case events.KindToolStart:
			starts[pr.ToolName] = ev
		case events.KindToolComplete:
			start, ok := starts[pr.ToolName]
			if !ok || start.Seq >= ev.Seq {
				t.Fatalf("%s: tool_complete (seq %d) without an earlier tool_start", pr.ToolName, ev.Seq)
			}
			if pr.ToolName == "finish" {
				continue // its static checks write their own event in between
			}
			sameStatement := start.CreatedAt.Equal(ev.CreatedAt)
			if slow := pr.ToolName == "generate_image"; slow == sameStatement {
				t.Errorf("%s: tool_start and tool_complete in one statement = %t, want %t", pr.ToolName, sameStatement, !slow)
			}
		}
	}
	if len(starts) != 3 {
		t.Fatalf("tool_start events for %d tools, want 3", len(starts))
	}
}
