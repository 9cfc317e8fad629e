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

-- Cost by tree: every task names the root of the tree it is part of (its
-- own id, or its parent's root), set by the database, so that a tree's
-- spend is one indexed sum, and stays one when a task between a child and
-- its root is deleted (its children's parent_task_id is set NULL, their
-- root stays).
ALTER TABLE ai_tasks ADD COLUMN root_task_id uuid;

COMMENT ON COLUMN ai_tasks.root_task_id IS 'The root of the task''s tree: its own id, or its parent''s root when it was created; the database''s.';

WITH RECURSIVE tree AS (
    SELECT id, id AS root FROM ai_tasks WHERE parent_task_id IS NULL
    UNION ALL
    SELECT c.id, tree.root FROM ai_tasks c JOIN tree ON c.parent_task_id = tree.id
)
UPDATE ai_tasks t SET root_task_id = tree.root FROM tree WHERE t.id = tree.id;

-- A cycle (no root) names itself.
UPDATE ai_tasks SET root_task_id = id WHERE root_task_id IS NULL;

CREATE INDEX ai_tasks_root_idx ON ai_tasks (root_task_id);

-- What the deleted tasks of a tree spent, one row a deleted task, added
-- as retention deletes them and dropped with the tree's last task: a
-- tree's figures are its live tasks' and these.
CREATE TABLE task_tree_rollup (
    root_task_id uuid NOT NULL,
    project_id   uuid NOT NULL,
    task_id      uuid NOT NULL,
    tokens_in    bigint NOT NULL DEFAULT 0,
    tokens_out   bigint NOT NULL DEFAULT 0,
    cost         numeric(14, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (root_task_id, task_id)
);

COMMENT ON TABLE task_tree_rollup IS 'What deleted tasks spent, by the root of their tree: added in the transaction that deletes them, read with the live tasks for a tree''s figures.';

ALTER TABLE task_tree_rollup ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON task_tree_rollup FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON task_tree_rollup TO authenticated, service_role;
