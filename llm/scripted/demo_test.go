package scripted_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

func tools(names ...string) []llm.Tool {
	var out []llm.Tool
	for _, n := range names {
		out = append(out, llm.Tool{Name: n, Parameters: map[string]any{"type": "object"}})
	}
	return out
}

func user(content string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: content} }

func called(id, name, args string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: args}}}
}

func result(id, content string) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: content}
}

func TestDemoModel(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		tools     []llm.Tool
		messages  []llm.Message
		wantCalls []llm.ToolCall
		wantText  string // a substring of the content, when no calls are wanted
	}{
		{
			name:      "WritesNamedFile",
			tools:     tools("write_file", "read_file", "finish"),
			messages:  []llm.Message{{Role: llm.RoleSystem, Content: "sys"}, user("create hello.txt saying hi")},
			wantCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"hi\n","path":"hello.txt"}`}},
		},
		{
			name:      "WritesQuotedContentInFolder",
			tools:     tools("write_file"),
			messages:  []llm.Message{user(`Please write docs/plan.md containing "step one"`)},
			wantCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"step one\n","path":"docs/plan.md"}`}},
		},
		{
			name:      "WritesPromptWhenNoContentGiven",
			tools:     tools("write_file"),
			messages:  []llm.Message{user("make notes.txt")},
			wantCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"make notes.txt\n","path":"notes.txt"}`}},
		},
		{
			name:      "FallsBackToNotes",
			tools:     tools("write_file"),
			messages:  []llm.Message{user("remember to buy milk")},
			wantCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"# Notes\n\nremember to buy milk\n","path":"NOTES.md"}`}},
		},
		{
			name:  "FinishesAfterWrite",
			tools: tools("write_file", "finish"),
			messages: []llm.Message{
				user("create hello.txt saying hi"),
				called("call_1", "write_file", `{"path":"hello.txt","content":"hi\n"}`),
				result("call_1", "wrote 3 bytes"),
			},
			wantCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"Created hello.txt"}`}},
		},
		{
			name:  "SummarisesAfterWriteWithoutFinish",
			tools: tools("write_file"),
			messages: []llm.Message{
				user("create hello.txt saying hi"),
				called("call_1", "write_file", `{"path":"hello.txt","content":"hi\n"}`),
				result("call_1", "ok"),
			},
			wantText: "Created hello.txt",
		},
		{
			name:  "SummarisesAfterFinish",
			tools: tools("write_file", "finish"),
			messages: []llm.Message{
				user("create hello.txt saying hi"),
				called("call_1", "write_file", `{"path":"hello.txt","content":"hi\n"}`),
				result("call_1", "ok"),
				called("call_2", "finish", `{"summary":"Created hello.txt"}`),
				result("call_2", "ok"),
			},
			wantText: "Created hello.txt",
		},
		{
			name:  "NewPromptStartsOver",
			tools: tools("write_file", "finish"),
			messages: []llm.Message{
				user("create hello.txt saying hi"),
				called("call_1", "write_file", `{"path":"hello.txt","content":"hi\n"}`),
				result("call_1", "ok"),
				{Role: llm.RoleAssistant, Content: "Created hello.txt"},
				user("create bye.txt saying bye"),
			},
			wantCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"content":"bye\n","path":"bye.txt"}`}},
		},
		{
			name:      "ChatListsFilesFirst",
			tools:     tools("list_files", "read_file"),
			messages:  []llm.Message{user("what is in the repo?")},
			wantCalls: []llm.ToolCall{{Name: "list_files", Arguments: `{"path":""}`}},
		},
		{
			name:  "ChatSummarisesListing",
			tools: tools("list_files", "read_file"),
			messages: []llm.Message{
				user("what is in the repo?"),
				called("call_1", "list_files", `{"path":""}`),
				result("call_1", "README.md\nmain.go"),
			},
			wantText: "README.md\nmain.go",
		},
		{
			name:  "ChatEmptyWorkspace",
			tools: tools("list_files"),
			messages: []llm.Message{
				user("what is in the repo?"),
				called("call_1", "list_files", `{"path":""}`),
				result("call_1", ""),
			},
			wantText: "The workspace is empty.",
		},
		{
			name:     "ChatWithoutTools",
			messages: []llm.Message{user("hello")},
			wantText: "scripted demo model",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reply := scripted.DemoModel().Respond(&scripted.Request{Model: "demo", Tools: tt.tools, Messages: tt.messages})
			if reply.Status != 0 {
				t.Fatalf("reply status = %d, want a completion", reply.Status)
			}
			if !reflect.DeepEqual(reply.ToolCalls, tt.wantCalls) {
				t.Errorf("tool calls = %+v, want %+v", reply.ToolCalls, tt.wantCalls)
			}
			if tt.wantCalls == nil && !strings.Contains(reply.Content, tt.wantText) {
				t.Errorf("content = %q, want it to contain %q", reply.Content, tt.wantText)
			}
		})
	}
}

func FuzzDemoModelPrompt(f *testing.F) {
	f.Add("create hello.txt saying hi")
	f.Add("write a/b/c.go with the content package c")
	f.Add("saying saying.txt saying")
	f.Add("")
	f.Fuzz(func(t *testing.T, prompt string) {
		reply := scripted.DemoModel().Respond(&scripted.Request{
			Tools:    tools("write_file", "finish"),
			Messages: []llm.Message{user(prompt)},
		})
		if len(reply.ToolCalls) != 1 || reply.ToolCalls[0].Name != "write_file" {
			t.Fatalf("reply = %+v, want one write_file call", reply)
		}
		var args struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal([]byte(reply.ToolCalls[0].Arguments), &args); err != nil {
			t.Fatalf("arguments %q are not JSON: %v", reply.ToolCalls[0].Arguments, err)
		}
		if args.Path == "" || strings.HasPrefix(args.Path, "/") || !strings.HasSuffix(args.Content, "\n") {
			t.Fatalf("arguments = %+v, want a relative path and content ending in a newline", args)
		}
	})
}

func ExampleDemoModel() {
	srv := httptest.NewServer(&scripted.Server{Responder: scripted.DemoModel()})
	defer srv.Close()

	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "demo", HTTPClient: srv.Client()})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := client.Complete(context.Background(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "create hello.txt saying hi"}},
		Tools:    tools("write_file", "finish"),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Message.ToolCalls[0].Name, resp.Message.ToolCalls[0].Arguments)
	// Output:
	// write_file {"content":"hi\n","path":"hello.txt"}
}
