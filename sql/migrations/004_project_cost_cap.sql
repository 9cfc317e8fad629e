-- A daily cost cap per project: the owner's override of the operator's
-- default (PROJECT_MAX_COST_USD_PER_DAY), and what each task spent each
-- UTC day, which the cap is checked against before every model call.

CREATE TABLE project_settings (
    project_id           uuid PRIMARY KEY,
    max_cost_usd_per_day numeric(14, 6) CHECK (max_cost_usd_per_day >= 0),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE project_settings IS 'A project''s own settings, set by its owner.';
COMMENT ON COLUMN project_settings.max_cost_usd_per_day IS 'Cap of what the project''s tasks spend a UTC day, in US dollars; NULL: the operator''s PROJECT_MAX_COST_USD_PER_DAY. At the cap, tasks pause until it is raised or the day turns.';

-- One row per task and UTC day, only ever added to by the task's own
-- transactions (its row is no other task's): the project's spend of a day
-- is their sum, read before each model call. It has no reference to the
-- task, so a day's spend stays when retention deletes the task.
CREATE TABLE project_day_spend (
    project_id uuid NOT NULL,
    day        date NOT NULL,
    task_id    uuid NOT NULL,
    cost       numeric(14, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, day, task_id)
);

COMMENT ON TABLE project_day_spend IS 'What each task spent each UTC day, by project: added to as the task''s cost grows, summed on read for the daily cap.';

ALTER TABLE project_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE project_day_spend ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON project_settings, project_day_spend FROM PUBLIC, anon, authenticated, service_role;

-- The owner sets the cap of its projects; the time is the database's.
GRANT SELECT ON project_settings TO authenticated;
GRANT INSERT (project_id, max_cost_usd_per_day) ON project_settings TO authenticated;
GRANT UPDATE (max_cost_usd_per_day) ON project_settings TO authenticated;
GRANT SELECT, INSERT, UPDATE, DELETE ON project_settings TO service_role;
GRANT SELECT ON project_day_spend TO authenticated, service_role;

COMMENT ON COLUMN inbox_items.reason IS 'Why an await_user_input item exists: question, budget, budget_exceeded (the project''s daily cap), stuck_idle, stuck_repeat, stuck_errors (completed for task_completed).';
