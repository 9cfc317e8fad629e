package sql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DayCap is a project's daily cost cap and what its tasks spent on the
// current UTC day. Each task's spend is added to a row of its own as its
// cost grows (checkpoints, the end of an attempt), so the sum covers every
// replica's tasks up to their last recorded model call.
type DayCap struct {
	// CapUSD is the cap in US dollars; nil: none.
	CapUSD *float64
	// SpentUSD is the spend of the UTC day so far.
	SpentUSD float64
}

// Reached reports whether the spend, with unrecorded added, is at the cap.
func (c DayCap) Reached(unrecorded float64) bool {
	return c.CapUSD != nil && c.SpentUSD+unrecorded >= *c.CapUSD
}

// ReadDayCap returns project's cap (its own, else defaultUSD when above 0)
// and its spend of the current UTC day, with a cap or without (the
// project's settings show it).
func ReadDayCap(ctx context.Context, db DBTX, projectID uuid.UUID, defaultUSD float64) (DayCap, error) {
	var c DayCap
	if err := db.QueryRow(ctx, `SELECT c.cap::float8, (CASE WHEN c.cap IS NULL THEN agentworker_day_spend($1) ELSE c.spent END)::float8
		FROM agentworker_day_cap($1, $2) c`,
		projectID, defaultUSD).Scan(&c.CapUSD, &c.SpentUSD); err != nil {
		return DayCap{}, fmt.Errorf("read the daily cap of project %s: %w", projectID, err)
	}
	return c, nil
}

// ResumeUnderCap resumes the tasks paused at their project's daily cap
// whose project is under it again (the cap was raised, or the UTC day
// turned), of one project or, with uuid.Nil, of all; defaultUSD is the
// cap of projects without their own. It returns the tasks resumed.
func ResumeUnderCap(ctx context.Context, db DBTX, defaultUSD float64, projectID uuid.UUID) ([]uuid.UUID, error) {
	var project *uuid.UUID
	if projectID != uuid.Nil {
		project = &projectID
	}
	rows, err := db.Query(ctx, `SELECT agentworker_resume_under_cap($1, $2)`, defaultUSD, project)
	if err != nil {
		return nil, fmt.Errorf("resume the tasks paused at the daily cap of project %s: %w", projectID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("resume the tasks paused at the daily cap of project %s: %w", projectID, err)
	}
	return ids, nil
}

// DeleteDaySpendBefore deletes up to limit rows of project_day_spend of
// UTC days before day: the cap reads only the current day's, and the usage
// views hold the history.
func DeleteDaySpendBefore(ctx context.Context, db DBTX, day time.Time, limit int) (int, error) {
	tag, err := db.Exec(ctx, `DELETE FROM project_day_spend WHERE (project_id, day, task_id) IN (
		SELECT project_id, day, task_id FROM project_day_spend WHERE day < $1::date LIMIT $2)`, day.UTC().Format(time.DateOnly), limit)
	if err != nil {
		return 0, fmt.Errorf("delete up to %d daily spend rows before %s: %w", limit, day.Format(time.DateOnly), err)
	}
	return int(tag.RowsAffected()), nil
}

// ProjectSettings are a project's own settings.
type ProjectSettings struct {
	ProjectID uuid.UUID `json:"project_id"`
	// MaxCostUSDPerDay is the project's daily cap; nil: the operator's.
	MaxCostUSDPerDay *float64 `json:"max_cost_usd_per_day"`
}

// ReadProjectSettings returns a project's settings (all unset when it has
// none).
func ReadProjectSettings(ctx context.Context, db DBTX, projectID uuid.UUID) (ProjectSettings, error) {
	s := ProjectSettings{ProjectID: projectID}
	err := db.QueryRow(ctx, `SELECT max_cost_usd_per_day::float8 FROM project_settings WHERE project_id = $1`,
		projectID).Scan(&s.MaxCostUSDPerDay)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ProjectSettings{}, fmt.Errorf("read the settings of project %s: %w", projectID, err)
	}
	return s, nil
}

// SetProjectSettings writes a project's settings.
func SetProjectSettings(ctx context.Context, db DBTX, s ProjectSettings) error {
	if _, err := db.Exec(ctx, `INSERT INTO project_settings (project_id, max_cost_usd_per_day) VALUES ($1, $2)
		ON CONFLICT (project_id) DO UPDATE SET max_cost_usd_per_day = excluded.max_cost_usd_per_day, updated_at = now()`,
		s.ProjectID, s.MaxCostUSDPerDay); err != nil {
		return fmt.Errorf("set the settings of project %s: %w", s.ProjectID, err)
	}
	return nil
}
