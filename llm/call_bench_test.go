package llm_test

import (
	"testing"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// BenchmarkCallOnAFreshGoroutine makes one call a new goroutine, as a
// worker's every task does (River runs each job on a goroutine of its own),
// against a loopback stand-in of the provider: what a call costs the
// client and the stand-in together, a fresh stack's growth included.
func BenchmarkCallOnAFreshGoroutine(b *testing.B) {
	// A build's first call: one tool call back.
	reply := llmtest.Call("write_file", map[string]string{"path": "out.txt", "content": "hello"})
	srv := llmtest.NewWith(b, scripted.Func(func(*scripted.Request) scripted.Reply { return reply }))
	client, err := llm.New(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "You are a coding agent."}, {Role: llm.RoleUser, Content: "create hello.txt"}},
		Tools: []llm.Tool{{Name: "write_file", Description: "Writes a file.", Parameters: map[string]any{"type": "object"}}}}
	for _, mode := range []struct {
		name   string
		stream bool
	}{{"Complete", false}, {"Stream", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := req
			if mode.stream {
				r.OnDelta = func(string) {}
			}
			b.ReportAllocs()
			for b.Loop() {
				done := make(chan error, 1)
				go func() {
					_, err := client.Complete(b.Context(), r)
					done <- err
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
