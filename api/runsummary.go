package api

import (
	"net/http"
	"time"

	agentsql "github.com/agentworker/agentworker/sql"
)

// RunSummary is the answer of GET /v1/projects/{id}/runs/summary: the
// project's runs per UTC day, agent, status and error code.
type RunSummary struct {
	DaysRequested int              `json:"days_requested"`
	Groups        []RunSummaryItem `json:"groups"`
}

// RunSummaryItem is one group of runs.
type RunSummaryItem struct {
	Day string `json:"day"`
	agentsql.RunGroup
}

// runSummary serves GET /v1/projects/{id}/runs/summary[?days=n].
func (a *API) runSummary(w http.ResponseWriter, r *http.Request) error {
	days, err := intParam(r, "days", defaultUsageDays, maxUsageDays)
	if err != nil {
		return err
	}
	groups, err := agentsql.ProjectRunSummary(r.Context(), a.pool, accessOf(r).id, days)
	if err != nil {
		return err
	}
	out := RunSummary{DaysRequested: days, Groups: make([]RunSummaryItem, len(groups))}
	for i, g := range groups {
		out.Groups[i] = RunSummaryItem{Day: g.Day.Format(time.DateOnly), RunGroup: g}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
