package console_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestToolApprovalsInChromium: a build whose writes ask waits with its
// calls in the task's inbox, each shown as a diff; one denied with a
// message and one approved from the page, the build goes on: the approved
// write lands, the model reads the denial.
func TestToolApprovalsInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	var denial atomic.Value
	model := scripted.Func(func(req *scripted.Request) scripted.Reply {
		var results []string
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				results = append(results, m.Content)
			}
		}
		if len(results) == 0 {
			return llmtest.Calls(
				llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "alpha\n"}),
				llmtest.Call("write_file", map[string]string{"path": "b.txt", "content": "beta\n"}))
		}
		denial.Store(strings.Join(results, "\n"))
		return llmtest.Call("finish", map[string]string{"summary": "wrote a.txt"})
	})
	c := newConsole(t, model)
	var id uuid.UUID
	if err := c.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input) VALUES ($1, 'build', 'write a and b',
		'{"tool_policy": [{"tool": "write_file", "action": "ask", "reason": "writes need a look"}]}') RETURNING id`, c.project).Scan(&id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the build to wait for approval", 60*time.Second, func() bool {
		var status string
		err := c.pool.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, id).Scan(&status)
		return err == nil && status == "awaiting_approval"
	})
	card := fmt.Sprintf(`#board .board-col[data-column="review"] li.card[data-id="%s"][data-status="awaiting_approval"]`, id)
	calls := `#task-inbox .inbox-item.tool_approval .tool-call`
	ctx := browse(t, 120*time.Second)
	run(t, ctx, "the calls wait in the task's inbox",
		chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), visible(card), click(card),
		visible(calls+` pre.call-diff span.add`), until(`document.querySelectorAll('`+calls+`').length === 2`))
	var lines []string
	eval(t, ctx, `[...document.querySelectorAll('`+calls+` pre.call-diff span')].map(s => s.className + " " + s.textContent)`, &lines)
	if got := strings.Join(lines, "|"); got != "meta +++ a.txt|add +alpha|meta +++ b.txt|add +beta" {
		t.Errorf("the calls' diffs = %q", got)
	}
	screenshot(t, ctx, "tool-approvals")
	var bCall string
	eval(t, ctx, `[...document.querySelectorAll('`+calls+`')].find(c => c.textContent.includes("b.txt")).dataset.call`, &bCall)
	var aCall string
	eval(t, ctx, `[...document.querySelectorAll('`+calls+`')].find(c => c.textContent.includes("a.txt")).dataset.call`, &aCall)
	b := fmt.Sprintf(`%s[data-call="%s"]`, calls, bCall)
	a := fmt.Sprintf(`%s[data-call="%s"]`, calls, aCall)
	run(t, ctx, "deny b.txt with a message", keys(b+" input.deny-message", "b.txt is generated"), click(b+" button.deny-call"),
		until(`document.querySelectorAll('`+calls+`').length === 1`))
	run(t, ctx, "approve a.txt", click(a+" button.approve-call"),
		visible(fmt.Sprintf(`#board .board-col[data-column="succeeded"] li.card[data-id="%s"]`, id)))
	if got, _, err := c.store.Read(t.Context(), c.project.String(), "a.txt"); err != nil || string(got) != "alpha\n" {
		t.Errorf("a.txt = %q, %v; want the approved write", got, err)
	}
	if _, _, err := c.store.Read(t.Context(), c.project.String(), "b.txt"); err == nil {
		t.Error("b.txt was written, but its call was denied")
	}
	if d, _ := denial.Load().(string); !strings.Contains(d, "b.txt is generated") {
		t.Errorf("the model's results %q lack the denial's message", d)
	}
}
