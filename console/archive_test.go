package console_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/poll"
)

// TestArchivedTimelineInChromium opens a finished build whose events were
// archived and dropped from agent_events: the page shows its timeline from
// the archive, every event once, up to the task's last seq.
func TestArchivedTimelineInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, consoleModel())
	task, err := agentsql.InsertTask(t.Context(), c.pool, agentsql.NewTask{ProjectID: c.project, Type: agentsql.TypeBuild, Prompt: "create hello.txt"})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the build succeeds", 60*time.Second, func() bool {
		got, err := agentsql.GetTask(t.Context(), c.pool, task.ID)
		return err == nil && got.Status == agentsql.StatusSucceeded
	})
	var last int
	if err := c.pool.QueryRow(t.Context(), `SELECT max(seq) FROM agent_events WHERE task_id = $1`, task.ID).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if err := c.archive.ArchiveTasks(t.Context(), []uuid.UUID{task.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(t.Context(), `DELETE FROM agent_events WHERE task_id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}

	ctx := browse(t, 90*time.Second)
	run(t, ctx, "open the archived task",
		chromedp.Navigate(c.page()+"#task="+task.ID.String()),
		visible(`body[data-status="completed"]`),
		until(`document.body.dataset.lastSeq === "`+strconv.Itoa(last)+`"`),
	)
	var state struct {
		Applied    string `json:"applied"`
		Duplicates string `json:"duplicates"`
		Rows       int    `json:"rows"`
	}
	eval(t, ctx, `({applied: document.body.dataset.applied, duplicates: document.body.dataset.duplicates || "0",
		rows: document.querySelectorAll('#timeline li').length})`, &state)
	if state.Applied != strconv.Itoa(last) || state.Duplicates != "0" || state.Rows == 0 {
		t.Errorf("the page applied %s of %d archived events with %s duplicates, %d timeline rows", state.Applied, last, state.Duplicates, state.Rows)
	}
	screenshot(t, ctx, "archived-timeline")
}
