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
// column with its changes unapplied; a comment on a line of its diff and a
// reject with feedback from the page reach the model's revision, and
// approved from the page the revision lands.
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
		chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), visible(card), click(card),
		visible(fmt.Sprintf(`body[data-task="%s"][data-task-status="review"]`, id)), visible(`#review-form`), enabled(`#approve`))
	if got := file(); got != "" {
		t.Fatalf("a.txt = %q while in review, want it not written", got)
	}
	screenshot(t, ctx, "review-queue")
	line := `#changes .file-diff[data-path="a.txt"] span[data-line="1"]`
	run(t, ctx, "comment on the diff's first line", click(`#tab-changes`), visible(line), click(line), visible(`#comment-form`),
		keys(`#comment-body`, "not v1"), click(`#comment-submit`), visible(`#comments li[data-path="a.txt"][data-line="1"]`))
	run(t, ctx, "reject with feedback", keys(`#feedback`, "make it v2"), click(`#reject`))
	runs(2)
	if p, _ := revisionPrompt.Load().(string); !strings.Contains(p, "a.txt:1: not v1") {
		t.Errorf("the revision's prompt %q lacks the line comment", p)
	}
	run(t, ctx, "approve the revision", visible(card), enabled(`#approve`), click(`#approve`),
		visible(fmt.Sprintf(`#board .board-col[data-column="succeeded"] li.card[data-id="%s"]`, id)))
	if got := file(); got != "v2\n" {
		t.Errorf("a.txt = %q after approving the revision, want v2", got)
	}
}
