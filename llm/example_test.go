package llm_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
)

func ExampleClient_Complete() {
	// A scripted endpoint stands in for the OpenAI API.
	srv := httptest.NewServer(&scripted.Server{Responder: scripted.Queue(
		scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"hello.txt","content":"hi\n"}`}}},
	)})
	defer srv.Close()

	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "gpt-test", HTTPClient: srv.Client()})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := client.Complete(context.Background(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "create hello.txt saying hi"}},
		Tools:    []llm.Tool{{Name: "write_file", Parameters: map[string]any{"type": "object"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, call := range resp.Message.ToolCalls {
		fmt.Println(call.ID, call.Name, call.Arguments)
	}
	fmt.Println(resp.FinishReason)
	// Output:
	// call_1 write_file {"path":"hello.txt","content":"hi\n"}
	// tool_calls
}

func ExampleClient_Complete_streaming() {
	srv := httptest.NewServer(&scripted.Server{Responder: scripted.Queue(
		scripted.Reply{Content: "Hello, world!"},
	)})
	defer srv.Close()

	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "gpt-test", HTTPClient: srv.Client()})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := client.Complete(context.Background(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "greet me"}},
		OnDelta:  func(delta string) { fmt.Printf("%q\n", delta) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Message.Content)
	// Output:
	// "Hello,"
	// " world"
	// "!"
	// Hello, world!
}
