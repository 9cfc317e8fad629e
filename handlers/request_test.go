package handlers_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestRequestBodies pins the exact first request body of each task type:
// system prompt, tools offered and tool_choice, as the endpoint receives it.
func TestRequestBodies(t *testing.T) {
	t.Parallel()
	set, err := prompts.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		typ    string
		choice llm.ToolChoice
	}{{"build", llm.ToolChoiceRequired}, {"chat", llm.ToolChoiceAuto}, {"plan", llm.ToolChoiceAuto}} {
		t.Run(tt.typ, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.New(t, llmtest.Text("ok"))
			client, err := llm.New(srv.Config())
			if err != nil {
				t.Fatal(err)
			}
			system, err := set.System(tt.typ, prompts.Context{ProjectID: "p1", ProjectType: "vanilla", Files: []string{"index.html"}, FileCount: 1,
				EntryPoints: []string{"index.html"}})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tools.ForTaskType(tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Complete(t.Context(), llm.Request{Tools: reg.Definitions(), ToolChoice: tt.choice,
				Messages: []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: "add a footer"}}}); err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, srv.Requests()[0].Body, "", "  "); err != nil {
				t.Fatal(err)
			}
			golden(t, "request_"+tt.typ, pretty.String()+"\n")
		})
	}
}
