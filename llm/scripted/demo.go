package scripted

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentworker/agentworker/llm"
)

// Tool names the demo model knows.
const (
	toolWriteFile = "write_file"
	toolFinish    = "finish"
	toolListFiles = "list_files"
)

// demoFallbackFile is written when the prompt names no file.
const demoFallbackFile = "NOTES.md"

// maxDemoSummary bounds how many characters of a tool result the demo model
// repeats.
const maxDemoSummary = 500

var (
	// demoFilename matches a relative file name with an extension, such as
	// hello.txt or docs/plan.md.
	demoFilename = regexp.MustCompile(`(?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,10}\b`)
	// demoContent matches the text a prompt asks to put in the file.
	demoContent = regexp.MustCompile(`(?is)\b(?:saying|containing|with (?:the )?(?:content|text))\s+(.+)$`)
)

// DemoModel returns the deterministic rule-based model of `agentworker
// demo`. It looks only at the conversation since the last user message:
//
// With a write_file tool (a task run):
//   - first turn: it calls write_file{path, content} with the file the
//     prompt names: "create hello.txt saying hi" writes "hi\n" to hello.txt;
//     a prompt naming no file is written to NOTES.md;
//   - after the write_file result: it calls finish{summary} when a finish
//     tool is offered, and otherwise answers with the summary text, e.g.
//     "Created hello.txt";
//   - after the finish result: it answers with the summary text.
//
// Without a write_file tool (chat or planning): it calls list_files{path: ""}
// first when that tool is offered, then answers with a short text about
// what it saw.
func DemoModel() Responder {
	return Func(demoRespond)
}

func demoRespond(req *Request) Reply {
	last, prompt := req.LastUserMessage()
	var calls []llm.ToolCall // the demo's own tool calls since the prompt
	var results []llm.Message
	for _, m := range req.Messages[last+1:] {
		switch m.Role {
		case llm.RoleAssistant:
			calls = append(calls, m.ToolCalls...)
		case llm.RoleTool:
			results = append(results, m)
		}
	}

	if req.HasTool(toolWriteFile) {
		written := lastCall(calls, toolWriteFile)
		if written == nil {
			path, content := demoFile(prompt)
			return demoCall(toolWriteFile, map[string]string{"path": path, "content": content})
		}
		summary := "Created " + demoPath(*written)
		if req.HasTool(toolFinish) && lastCall(calls, toolFinish) == nil {
			return demoCall(toolFinish, map[string]string{"summary": summary})
		}
		return Reply{Content: summary}
	}

	if req.HasTool(toolListFiles) && lastCall(calls, toolListFiles) == nil {
		return demoCall(toolListFiles, map[string]string{"path": ""})
	}
	if len(results) > 0 {
		seen := strings.TrimSpace(results[len(results)-1].Content)
		if runes := []rune(seen); len(runes) > maxDemoSummary {
			seen = string(runes[:maxDemoSummary]) + "…"
		}
		if seen == "" {
			return Reply{Content: "The workspace is empty. Ask me to create a file, e.g. \"create hello.txt saying hi\"."}
		}
		return Reply{Content: "Here is what the workspace holds:\n" + seen}
	}
	return Reply{Content: fmt.Sprintf("I am the scripted demo model; I read your message (%d characters). Ask me to create a file, e.g. \"create hello.txt saying hi\".", len(prompt))}
}

// demoFile derives the file to write from a prompt.
func demoFile(prompt string) (path, content string) {
	path = demoFilename.FindString(prompt)
	if path == "" {
		return demoFallbackFile, "# Notes\n\n" + strings.TrimSpace(prompt) + "\n"
	}
	content = strings.TrimSpace(prompt)
	if m := demoContent.FindStringSubmatch(prompt); m != nil {
		content = strings.Trim(strings.TrimSpace(m[1]), "\"'`")
	}
	return path, content + "\n"
}

// demoPath returns the path argument of a write_file call.
func demoPath(call llm.ToolCall) string {
	var args struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args.Path == "" {
		return "the file"
	}
	return args.Path
}

// lastCall returns the last call of the named tool, or nil.
func lastCall(calls []llm.ToolCall, name string) *llm.ToolCall {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Name == name {
			return &calls[i]
		}
	}
	return nil
}

// demoCall is a reply calling one tool with args.
func demoCall(name string, args map[string]string) Reply {
	data, _ := json.Marshal(args) // a map of strings always marshals
	return Reply{ToolCalls: []llm.ToolCall{{Name: name, Arguments: string(data)}}}
}
