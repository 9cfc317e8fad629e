package api

import (
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Logs is the answer of GET /v1/projects/{id}/logs: the page, newest
// first, and the cursor of the next (older) page, empty on the last.
type Logs struct {
	Logs []agentsql.LogEntry `json:"logs"`
	Next string              `json:"next,omitempty"`
}

const (
	defaultLogsLimit = 50
	maxLogsLimit     = 200
	// maxLogsText bounds the text searched for.
	maxLogsText = 200
)

// logs serves GET /v1/projects/{id}/logs?task=&run=&level=&q=&before=&limit=.
func (a *API) logs(w http.ResponseWriter, r *http.Request) error {
	params := r.URL.Query()
	limit, err := intParam(r, "limit", defaultLogsLimit, maxLogsLimit)
	if err != nil {
		return err
	}
	q := agentsql.LogQuery{Level: params.Get("level"), Text: params.Get("q"), Limit: limit}
	switch q.Level {
	case "", events.LevelDebug, events.LevelInfo, events.LevelWarn, events.LevelError:
	default:
		return validation("level %q is not one of debug, info, warn, error", bounded(q.Level))
	}
	if len(q.Text) > maxLogsText {
		return validation("q is at most %d bytes", maxLogsText)
	}
	for name, dst := range map[string]*uuid.UUID{"task": &q.TaskID, "run": &q.RunID} {
		if s := params.Get(name); s != "" {
			if *dst, err = uuid.Parse(s); err != nil {
				return validation("%s %q is not a uuid", name, s)
			}
		}
	}
	if s := params.Get("before"); s != "" {
		if q.Before, err = strconv.ParseInt(s, 10, 64); err != nil || q.Before < 1 {
			return validation("before %q is not a cursor of this route", s)
		}
	}
	entries, next, err := agentsql.ProjectLogs(r.Context(), a.pool, accessOf(r).id, q)
	if err != nil {
		return err
	}
	out := Logs{Logs: entries}
	if out.Logs == nil {
		out.Logs = []agentsql.LogEntry{}
	}
	if next != 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
