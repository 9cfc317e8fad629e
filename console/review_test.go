package console_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chromedp/chromedp"

	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestReviewQueueInChromium: a build to review waits in the board's review
// column, "waiting for your review", with its changes unapplied; a comment
// on a line of its diff (line numbers on both sides, the line highlighted)
// shows under that line and, with a reject's feedback, reaches the model's
// revision; the Changes tab follows the revision without a tab switch; the
// review card's Approve lands it, and the review forms hide once it is
// done.
func TestReviewQueueInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	var revisionPrompt atomic.Value
	model := scripted.Func(func(req *scripted.Request) scripted.Reply {
		last, prompt := req.LastUserMessage()
		if len(req.Messages[last+1:]) == 0 {
			content := "v1\n"
			if strings.Contains(prompt, "make it v2") {
				revisionPrompt.Store(prompt)
				content = "v2\n"
			}
			return llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": content})
		}
		return llmtest.Call("finish", map[string]string{"summary": "wrote a.txt"})
	})
	c := newConsole(t, model)
	var id uuid.UUID
	if err := c.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input) VALUES ($1, 'build', 'write a.txt', '{"review": true}') RETURNING id`,
		c.project).Scan(&id); err != nil {
		t.Fatal(err)
	}
	runs := func(n int) {
		t.Helper()
		poll.Until(t, fmt.Sprintf("review after %d runs", n), 60*time.Second, func() bool {
			var status string
			var got int
			err := c.pool.QueryRow(t.Context(), `SELECT status, (SELECT count(*) FROM task_runs WHERE task_id = $1) FROM ai_tasks WHERE id = $1`, id).Scan(&status, &got)
			return err == nil && status == "review" && got == n
		})
	}
	file := func() string {
		b, _, err := c.store.Read(t.Context(), c.project.String(), "a.txt")
		if err != nil {
			return ""
		}
		return string(b)
	}
	card := fmt.Sprintf(`#board .board-col[data-column="review"] li.card[data-id="%s"][data-status="review"]`, id)
	ctx := browse(t, 120*time.Second)
	runs(1)
	run(t, ctx, "the build waits in the review column",
		chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), visible(card), visible(card+` button.card-approve`),
		until(`document.querySelector("#inbox .inbox-item.review button.approve")`), click(card),
		visible(fmt.Sprintf(`body[data-task="%s"][data-task-status="review"]`, id)), visible(`#review-form`), enabled(`#approve`))
	if got := file(); got != "" {
		t.Fatalf("a.txt = %q while in review, want it not written", got)
	}
	var words struct {
		Card, Inbox, Note string
	}
	eval(t, ctx, `({card: document.querySelector('`+card+` .card-review').textContent,
		inbox: [...document.querySelectorAll('#inbox .inbox-item.review button')].map(b => b.textContent).join(","),
		note: document.querySelector('#review-form .review-note').textContent})`, &words)
	if !strings.Contains(words.Card, "waiting for your review") || words.Inbox != "Approve,Reject…" || !strings.Contains(words.Note, "Waiting for your review") {
		t.Errorf("the review's words: %+v", words)
	}
	line := `#changes .file-diff[data-path="a.txt"] .line[data-line="1"]`
	run(t, ctx, "comment on the diff's first line", click(`#tab-changes`), visible(line),
		until(`document.getElementById("changes-status").textContent.startsWith("Waiting for your review")`),
		click(line), visible(line+`.selected`), visible(line+` + #comment-form`),
		// The diff redraws while the comment is typed (here: its tab
		// shown again, without taking the focus; in a CI run: the task's
		// events arriving): the box keeps the focus, the typing goes on.
		keys(`#comment-body`, "not"), chromedp.Evaluate[chromedp.Void](`document.getElementById("tab-changes").click()`),
		chromedp.Sleep(500*time.Millisecond), visible(line+` + #comment-form`), chromedp.KeyEvent(" v1"), click(`#comment-submit`),
		visible(`#changes .file-diff[data-path="a.txt"] .line[data-line="1"] + ul.thread li.comment[data-line="1"]`))
	var numbers []string
	eval(t, ctx, `[...document.querySelectorAll('#changes .file-diff[data-path="a.txt"] .line')].map(r => r.className + "|" + r.querySelector('.ln.old').textContent + "|" + r.querySelector('.ln.new').textContent + "|" + r.querySelector('.text').textContent)`, &numbers)
	if want := []string{"line hunk|||@@ -0,0 +1 @@", "line add||1|+v1"}; strings.Join(numbers, ",") != strings.Join(want, ",") {
		t.Errorf("diff rows (class|old|new|text) = %q, want %q", numbers, want)
	}
	screenshot(t, ctx, "review-comment-inline")
	run(t, ctx, "reject with feedback", keys(`#feedback`, "make it v2"), click(`#reject`))
	runs(2)
	if p, _ := revisionPrompt.Load().(string); !strings.Contains(p, "a.txt:1: not v1") {
		t.Errorf("the revision's prompt %q lacks the line comment", p)
	}
	// The Changes tab stayed open: the revision shows without a switch.
	run(t, ctx, "the revision's diff", until(`[...document.querySelectorAll('#changes .file-diff[data-path="a.txt"] .line.add .text')].some(s => s.textContent === "+v2")`),
		until(`document.body.dataset.taskStatus === "review"`))
	screenshot(t, ctx, "review-revision")
	run(t, ctx, "approve the revision from its card", visible(card+` button.card-approve`), click(card+` button.card-approve`),
		visible(fmt.Sprintf(`#board .board-col[data-column="succeeded"] li.card[data-id="%s"]`, id)),
		visible(fmt.Sprintf(`body[data-task-status="succeeded"]`)))
	if got := file(); got != "v2\n" {
		t.Errorf("a.txt = %q after approving the revision, want v2", got)
	}
	// A task out of review shows neither the reject box nor the comment box.
	var shown []string
	eval(t, ctx, `["review-form", "comment-form", "feedback", "reject"].filter(id => document.getElementById(id).offsetParent !== null)`, &shown)
	if len(shown) != 0 {
		t.Errorf("shown on a succeeded task: %v", shown)
	}
	screenshot(t, ctx, "review-approved")
}
