package handlers_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestDependencySummaries: a task that waited for a build is given, in
// its first prompt, the build's result summary and the files it changed.
func TestDependencySummaries(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "src/banner.ts", "content": "export const banner = 'hi'\n"}),
		llmtest.Text("Added the banner component in src/banner.ts."),
		llmtest.Text("The banner is there."),
	}, handlers.Config{}, map[string]string{"a.txt": "a\n"})
	build, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeBuild, Prompt: "add a banner\nwith details"})
	if err != nil {
		t.Fatal(err)
	}
	review, err := agentsql.InsertTask(t.Context(), h.pool, agentsql.NewTask{ProjectID: h.project, Type: agentsql.TypeChat,
		Prompt: "check the banner", DependsOn: []uuid.UUID{build.ID}})
	if err != nil {
		t.Fatal(err)
	}
	_, task := h.wait(t, review.ID)
	result(t, task)
	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	if sys := reqs[0].Messages[0].Content; strings.Contains(sys, "What the tasks this one depends on did") {
		t.Errorf("the build, which depends on nothing, was given dependencies: %q", sys)
	}
	sys := reqs[2].Messages[0].Content
	for _, want := range []string{
		"## What the tasks this one depends on did",
		"### build task " + build.ID.String() + ": add a banner\n",
		"Summary: Added the banner component in src/banner.ts.",
		"Files changed: src/banner.ts (write)",
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("the dependent's system prompt lacks %q:\n%s", want, sys)
		}
	}
}
