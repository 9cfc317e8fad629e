package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
)

// GET /v1/tasks/{id}/events with Accept: application/json answers a page
// of the task's events behind the same guard as the stream; a bad limit is
// 400, a task outside the token 403.
func TestTaskEventsAsJSON(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	task := e.newTask(t, project)
	if _, err := events.NewRecorder(e.pool, task.ID, task.ProjectID).Emit(t.Context(),
		events.Log{Level: events.LevelInfo, Message: "<one>"},
		events.Log{Level: events.LevelInfo, Message: "two"},
		events.Log{Level: events.LevelInfo, Message: "three"},
	); err != nil {
		t.Fatal(err)
	}
	tok := e.token(t, "u", "authenticated", project)
	accept := map[string]string{"Accept": "application/json"}
	path := "/v1/tasks/" + task.ID.String() + "/events"

	var seqs []int
	after := 0
	for range 3 {
		r := e.call(t, http.MethodGet, path+"?limit=2&after="+strconv.Itoa(after), tok, "", accept)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("page after %d: %d %s", after, r.status, r.body)
		}
		var page struct {
			Events []events.Event `json:"events"`
			Next   *int           `json:"next"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			seqs = append(seqs, ev.Seq)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Errorf("pages gave seqs %v, want 1, 2, 3", seqs)
	}
	for _, limit := range []string{"0", "1001", "x"} {
		if r := e.call(t, http.MethodGet, path+"?limit="+limit, tok, "", accept); r.status != http.StatusBadRequest {
			t.Errorf("limit %s: %d %s, want 400", limit, r.status, r.body)
		}
	}
	other := e.token(t, "u", "authenticated", uuid.New())
	if r := e.call(t, http.MethodGet, path, other, "", accept); r.status != http.StatusForbidden {
		t.Errorf("another project's token: %d, want 403", r.status)
	}
}
