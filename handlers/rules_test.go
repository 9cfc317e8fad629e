package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/handlers/projectctx"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// toolResult is the content of the tool message answering the last tool
// call of request i (the last tool message of the request).
func toolResult(t *testing.T, reqs []scripted.Request, i int) string {
	t.Helper()
	msgs := reqs[i].Messages
	for j := len(msgs) - 1; j >= 0; j-- {
		if msgs[j].Role == llm.RoleTool {
			return msgs[j].Content
		}
	}
	t.Fatalf("request %d has no tool message", i+1)
	return ""
}

// everything is all the text the model was sent in one request.
func everything(req scripted.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content + "\n")
	}
	return b.String()
}

// TestRootRulesInEveryTaskTypesFirstPrompt: the root's AGENTS.md is in the
// system prompt of chat, plan and build tasks; a folder's is not.
func TestRootRulesInEveryTaskTypesFirstPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		taskType string
		replies  []scripted.Reply
	}{
		{"chat", []scripted.Reply{llmtest.Text("hello")}},
		{"build", []scripted.Reply{call("finish", m{"summary": "nothing to do"})}},
		{"plan", planReplies(threeStepPlan())},
	} {
		t.Run(tc.taskType, func(t *testing.T) {
			t.Parallel()
			h := setup(t, tc.replies, handlers.Config{}, map[string]string{
				"AGENTS.md":     "ROOT-RULE: use tabs.\n",
				"web/AGENTS.md": "WEB-RULE: no jQuery.\n",
				"web/index.js":  "x\n",
			})
			_, task := h.wait(t, h.insert(t, tc.taskType, "say hello", nil))
			if task.Status != agentsql.StatusSucceeded {
				t.Fatalf("status %s: %s", task.Status, task.Error)
			}
			first := h.llm.Requests()[0]
			sys := first.Messages[0].Content
			if !strings.Contains(sys, "ROOT-RULE: use tabs.") || !strings.Contains(sys, "## The project's rules (AGENTS.md)") {
				t.Errorf("system prompt lacks the root's rules:\n%s", sys)
			}
			if strings.Contains(everything(first), "WEB-RULE") {
				t.Errorf("the folder's rules are in the first prompt")
			}
		})
	}
}

// TestNestedRulesArriveWithTheFirstToolResultUnderTheirFolder: web/'s and
// web/deep/'s rules come with the first result that touches web/deep, the
// shallower first, not before and only once.
func TestNestedRulesArriveWithTheFirstToolResultUnderTheirFolder(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("read_file", m{"path": "README.md"}),
		call("read_file", m{"path": "web/deep/b.js"}),
		call("list_files", m{"path": "web"}),
		call("write_file", m{"path": "web/deep/c.js", "content": "c\n"}),
		call("finish", m{"summary": "read things"}),
	}, handlers.Config{}, map[string]string{
		"AGENTS.md":          "ROOT-RULE\n",
		"README.md":          "readme\n",
		"web/AGENTS.md":      "WEB-RULE\n",
		"web/deep/AGENTS.md": "DEEP-RULE\n",
		"web/deep/b.js":      "b\n",
		"lib/AGENTS.md":      "LIB-RULE\n",
	})
	_, task := h.wait(t, h.insert(t, "build", "look around", nil))
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status %s: %s", task.Status, task.Error)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 5 {
		t.Fatalf("model calls = %d, want 5", len(reqs))
	}
	for i := range 2 {
		if all := everything(reqs[i]); strings.Contains(all, "WEB-RULE") || strings.Contains(all, "DEEP-RULE") {
			t.Errorf("request %d has a folder's rules before anything under it was used", i+1)
		}
	}
	got := toolResult(t, reqs, 2)
	web, deep := strings.Index(got, "WEB-RULE"), strings.Index(got, "DEEP-RULE")
	if web < 0 || deep < 0 || web > deep || !strings.Contains(got, `"content":"b\n"`) {
		t.Errorf("the result of read_file web/deep/b.js = %q; want its content, then web's rules, then web/deep's", got)
	}
	for i := 3; i < 5; i++ {
		if r := toolResult(t, reqs, i); strings.Contains(r, "RULE") {
			t.Errorf("result %d gives rules again: %q", i, r)
		}
	}
	for _, req := range reqs {
		if strings.Contains(everything(req), "LIB-RULE") {
			t.Fatal("lib/'s rules were given though nothing under lib/ was used")
		}
		if n := strings.Count(everything(req), "WEB-RULE"); n > 1 {
			t.Fatalf("web's rules were given %d times", n)
		}
	}
}

// TestOneRulesFilePerFolder: AGENTS.override.md wins over AGENTS.md, which
// wins over the fallbacks; a fallback counts where it is alone, unless
// the configuration has none.
func TestOneRulesFilePerFolder(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"CLAUDE.md":              "CLAUDE-ROOT\n",
		"web/AGENTS.override.md": "WEB-OVERRIDE\n",
		"web/AGENTS.md":          "WEB-PLAIN\n",
		"web/CLAUDE.md":          "WEB-CLAUDE\n",
		"web/a.js":               "a\n",
	}
	for _, tc := range []struct {
		name      string
		fallbacks []string
		want      []string
		not       []string
	}{
		{"default fallbacks", nil, []string{"CLAUDE-ROOT", "WEB-OVERRIDE"}, []string{"WEB-PLAIN", "WEB-CLAUDE"}},
		{"no fallbacks", []string{}, []string{"WEB-OVERRIDE"}, []string{"CLAUDE-ROOT", "WEB-PLAIN", "WEB-CLAUDE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, []scripted.Reply{
				call("read_file", m{"path": "web/a.js"}),
				call("finish", m{"summary": "read"}),
			}, handlers.Config{RuleFallbacks: tc.fallbacks}, files)
			_, task := h.wait(t, h.insert(t, "build", "read a.js", nil))
			if task.Status != agentsql.StatusSucceeded {
				t.Fatalf("status %s: %s", task.Status, task.Error)
			}
			all := everything(h.llm.Requests()[1])
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("the model was not given %s", w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(all, n) {
					t.Errorf("the model was given %s", n)
				}
			}
		})
	}
}

// TestRulesBudgetEdge: the rules files share RulesBudget bytes; a root
// file of exactly the budget is whole, one byte more is cut with a note,
// and a folder's rules after a spent budget are only named.
func TestRulesBudgetEdge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		size    int
		rootCut bool
	}{
		{"at the budget", projectctx.RulesBudget, false},
		{"one byte over", projectctx.RulesBudget + 1, true},
		{"one byte under", projectctx.RulesBudget - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := "ROOT-START" + strings.Repeat("r", tc.size-len("ROOT-START")-len("ROOT-END")) + "ROOT-END"
			h := setup(t, []scripted.Reply{
				call("read_file", m{"path": "web/a.js"}),
				call("finish", m{"summary": "read"}),
			}, handlers.Config{}, map[string]string{"AGENTS.md": root, "web/AGENTS.md": "WEB-RULE\n", "web/a.js": "a\n"})
			_, task := h.wait(t, h.insert(t, "build", "read a.js", nil))
			if task.Status != agentsql.StatusSucceeded {
				t.Fatalf("status %s: %s", task.Status, task.Error)
			}
			reqs := h.llm.Requests()
			sys := reqs[0].Messages[0].Content
			cutNote := "AGENTS.md is cut here: the project's rules files share a budget of 32768 bytes"
			if got := strings.Contains(sys, "ROOT-END"); got == tc.rootCut {
				t.Errorf("root rules whole = %v, want %v", got, !tc.rootCut)
			}
			if got := strings.Contains(sys, cutNote); got != tc.rootCut {
				t.Errorf("cut note in the system prompt = %v, want %v", got, tc.rootCut)
			}
			if !strings.Contains(sys, "ROOT-START"+strings.Repeat("r", 100)) {
				t.Error("the root rules are missing")
			}
			res := toolResult(t, reqs, 1)
			left := projectctx.RulesBudget - tc.size
			switch {
			case left >= len("WEB-RULE\n"):
				if !strings.Contains(res, "WEB-RULE") || strings.Contains(res, "is cut here") {
					t.Errorf("web's rules within the budget: %q", res)
				}
			default:
				if strings.Contains(res, "WEB-RULE") || !strings.Contains(res, "web/AGENTS.md is cut here") {
					t.Errorf("web's rules past the budget: %q", res)
				}
			}
		})
	}
}

// TestNestedRulesSurviveAResume: the folders whose rules were given are in
// the checkpoint; the attempt that resumes does not give them again, and
// gives the others still.
func TestNestedRulesSurviveAResume(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("read_file", m{"path": "web/a.js"}),
		call("request_input", m{"question": "which colour?"}),
		call("read_file", m{"path": "web/b.js"}),
		call("read_file", m{"path": "api/c.go"}),
		call("finish", m{"summary": "read"}),
	}, handlers.Config{}, map[string]string{
		"AGENTS.md": "ROOT-RULE\n", "web/AGENTS.md": "WEB-RULE\n", "api/AGENTS.md": "API-RULE\n",
		"web/a.js": "a\n", "web/b.js": "b\n", "api/c.go": "package c\n",
	})
	id := h.insert(t, "build", "read things", nil)
	poll.Until(t, "awaiting input", 30*time.Second, func() bool {
		task, err := agentsql.GetTask(t.Context(), h.pool, id)
		return err == nil && task.Status == agentsql.StatusAwaitingInput
	})
	if _, err := agentsql.ControlTask(t.Context(), h.pool, id, agentsql.ActionAnswer, agentsql.ControlOpts{Answer: "blue", Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	_, task := h.wait(t, id)
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status %s: %s", task.Status, task.Error)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 5 {
		t.Fatalf("model calls = %d, want 5", len(reqs))
	}
	if !strings.Contains(toolResult(t, reqs, 1), "WEB-RULE") {
		t.Error("web's rules did not come with the first result under web/")
	}
	if r := toolResult(t, reqs, 3); strings.Contains(r, "WEB-RULE") {
		t.Errorf("after the resume, web's rules came again: %q", r)
	}
	if r := toolResult(t, reqs, 4); !strings.Contains(r, "API-RULE") {
		t.Errorf("after the resume, api's rules did not come: %q", r)
	}
	last := everything(reqs[4])
	if n := strings.Count(last, "WEB-RULE"); n != 1 {
		t.Errorf("the last request holds web's rules %d times, want 1", n)
	}
	if n := strings.Count(last, "ROOT-RULE"); n != 1 {
		t.Errorf("the last request holds the root's rules %d times, want 1", n)
	}
}

// TestNestedRulesSurviveCondensing: condensing the old tool outputs drops
// the output a folder's rules came with, never the rules.
func TestNestedRulesSurviveCondensing(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("some long log output that fills the model's window quickly\n", 400)
	h := setup(t, []scripted.Reply{
		call("read_file", m{"path": "logs/a.txt"}),
		call("read_file", m{"path": "logs/b.txt"}),
		call("read_file", m{"path": "logs/c.txt"}),
		call("list_files", m{"path": ""}),
		call("list_files", m{"path": ""}),
		call("list_files", m{"path": ""}),
		call("list_files", m{"path": ""}),
		call("finish", m{"summary": "read the logs"}),
	}, handlers.Config{ContextTokens: 6000}, map[string]string{
		"logs/AGENTS.md": "LOGS-RULE\n", "logs/a.txt": big, "logs/b.txt": big, "logs/c.txt": big,
	})
	_, task := h.wait(t, h.insert(t, "build", "read the logs", nil))
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status %s: %s", task.Status, task.Error)
	}
	reqs := h.llm.Requests()
	last := reqs[len(reqs)-1]
	first := last.Messages[3] // the result of read_file logs/a.txt
	if first.Role != llm.RoleTool || !strings.HasPrefix(first.Content, `{"condensed":true`) {
		t.Fatalf("the first result was not condensed: %.200q", first.Content)
	}
	if !strings.Contains(first.Content, "LOGS-RULE") || strings.Count(everything(last), "LOGS-RULE") != 1 {
		t.Errorf("condensed result = %q; want logs' rules kept, once", first.Content)
	}
}

// TestPlanStepCodeGenerationIsGivenTheRulesOfItsFile: a plan-driven build
// generates each step outside the conversation; each such call has the
// root's rules and those of the step file's folders.
func TestPlanStepCodeGenerationIsGivenTheRulesOfItsFile(t *testing.T) {
	t.Parallel()
	replies := append(planReplies(threeStepPlan()),
		llmtest.Text("export function greeting(name: string): string {\n  return `Hello, ${name}!`\n}\n"),
		llmtest.Text("import { greeting } from './greeting'\n\nexport function banner(): string {\n  return greeting('world')\n}\n"),
		llmtest.Text("import { banner } from './banner'\n\nconsole.log(banner())\n"),
	)
	h := setup(t, replies, handlers.Config{}, map[string]string{
		"src/main.ts": "console.log('hi')\n", "AGENTS.md": "ROOT-RULE\n", "src/AGENTS.md": "SRC-RULE\n",
	})
	_, plan := h.wait(t, h.insert(t, "plan", "add a greeting banner", nil))
	_, task := h.wait(t, h.insert(t, "build", "add a greeting banner", m{"plan_task_id": plan.ID}))
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status %s: %s", task.Status, task.Error)
	}
	reqs := h.llm.Requests()
	if len(reqs) != 6 {
		t.Fatalf("model calls = %d, want 6", len(reqs))
	}
	for i := 3; i < 6; i++ {
		sys := reqs[i].Messages[0].Content
		root, src := strings.Index(sys, "ROOT-RULE"), strings.Index(sys, "SRC-RULE")
		if root < 0 || src < root || strings.Count(sys, "SRC-RULE") != 1 {
			t.Errorf("code generation %d system prompt lacks the rules in order:\n%s", i-2, sys)
		}
	}
}
