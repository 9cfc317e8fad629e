package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// maxSettingsBody bounds a project settings body.
const maxSettingsBody = 4 << 10

// ProjectSettingsRequest is the body of PATCH /v1/projects/{id}/settings.
type ProjectSettingsRequest struct {
	// MaxCostUSDPerDay is the project's daily cost cap in US dollars, a
	// number or null (the operator's, PROJECT_MAX_COST_USD_PER_DAY);
	// required.
	MaxCostUSDPerDay json.RawMessage `json:"max_cost_usd_per_day"`
}

// ProjectSettings is a project's settings with the cap that holds and its
// spend of the current UTC day.
type ProjectSettings struct {
	ProjectID uuid.UUID `json:"project_id"`
	// MaxCostUSDPerDay is the project's own cap; null: the default.
	MaxCostUSDPerDay *float64 `json:"max_cost_usd_per_day"`
	// DefaultMaxCostUSDPerDay is the operator's cap; null: none.
	DefaultMaxCostUSDPerDay *float64 `json:"default_max_cost_usd_per_day"`
	// CapUSD is the cap that holds; null: none.
	CapUSD *float64 `json:"cap_usd"`
	// SpentTodayUSD is what the project's tasks spent on the UTC day so far.
	SpentTodayUSD float64 `json:"spent_today_usd"`
	// Resumed are the tasks paused at the cap that a change resumed.
	Resumed []uuid.UUID `json:"resumed,omitempty"`
}

// projectSettings serves GET /v1/projects/{id}/settings.
func (a *API) projectSettings(w http.ResponseWriter, r *http.Request) error {
	out, err := a.readProjectSettings(r, accessOf(r).id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setProjectSettings serves PATCH /v1/projects/{id}/settings. A cap under
// which the project's spend of the day now is resumes its tasks paused at
// the cap.
func (a *API) setProjectSettings(w http.ResponseWriter, r *http.Request) error {
	var req ProjectSettingsRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSettingsBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &apiError{http.StatusRequestEntityTooLarge, CodeValidation, "request body too large"}
		}
		return validation(`body must be {"max_cost_usd_per_day": number or null}`)
	}
	if req.MaxCostUSDPerDay == nil {
		return validation("max_cost_usd_per_day is required: a number, or null for the operator's cap")
	}
	var capUSD *float64
	if err := json.Unmarshal(req.MaxCostUSDPerDay, &capUSD); err != nil ||
		capUSD != nil && (*capUSD < 0 || math.IsInf(*capUSD, 0) || math.IsNaN(*capUSD) || *capUSD >= 1e8) {
		return validation("max_cost_usd_per_day must be a number from 0 to 99999999, or null")
	}
	project := accessOf(r).id
	if err := agentsql.SetProjectSettings(r.Context(), a.pool, agentsql.ProjectSettings{ProjectID: project,
		MaxCostUSDPerDay: capUSD}); err != nil {
		return err
	}
	resumed, err := agentsql.ResumeUnderCap(r.Context(), a.pool, a.cfg.ProjectMaxCostUSDPerDay, project)
	if err != nil {
		return err
	}
	out, err := a.readProjectSettings(r, project)
	if err != nil {
		return err
	}
	out.Resumed = resumed
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) readProjectSettings(r *http.Request, project uuid.UUID) (ProjectSettings, error) {
	s, err := agentsql.ReadProjectSettings(r.Context(), a.pool, project)
	if err != nil {
		return ProjectSettings{}, err
	}
	c, err := agentsql.ReadDayCap(r.Context(), a.pool, project, a.cfg.ProjectMaxCostUSDPerDay)
	if err != nil {
		return ProjectSettings{}, err
	}
	out := ProjectSettings{ProjectID: project, MaxCostUSDPerDay: s.MaxCostUSDPerDay, CapUSD: c.CapUSD, SpentTodayUSD: c.SpentUSD}
	if d := a.cfg.ProjectMaxCostUSDPerDay; d > 0 {
		out.DefaultMaxCostUSDPerDay = &d
	}
	return out, nil
}
