-- Usage: what deleted runs spent is rolled up as they go, the deletion of
-- finished tasks in batches, the usage views that read live runs and the
-- rollup together, and the daily cost cap of a project.

-- Adds the runs of p_tasks (or, with p_runs, those runs only) to the rollup.
CREATE OR REPLACE FUNCTION agentworker_roll_up_runs(p_tasks uuid[], p_runs uuid[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO usage_rollup AS u (project_id, day, usage_day, model, stopped, runs, tokens_in, tokens_out, cost)
    SELECT t.project_id,
           (coalesce(r.finished_at, r.started_at, r.created_at) AT TIME ZONE 'UTC')::date,
           (coalesce(r.finished_at, r.created_at) AT TIME ZONE 'UTC')::date,
           coalesce(t.model, 'unknown'),
           r.status NOT IN ('queued', 'running'),
           count(*), sum(r.tokens_in), sum(r.tokens_out), sum(r.cost)
    FROM task_runs r
    JOIN ai_tasks t ON t.id = r.task_id
    WHERE r.task_id = ANY (p_tasks) AND (p_runs IS NULL OR r.id = ANY (p_runs))
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (project_id, day, usage_day, model, stopped) DO UPDATE
    SET runs = u.runs + excluded.runs, tokens_in = u.tokens_in + excluded.tokens_in,
        tokens_out = u.tokens_out + excluded.tokens_out, cost = u.cost + excluded.cost
$$;

-- Before a task goes, its runs are rolled up (its row is still there to
-- say project and model); a run deleted on its own is rolled up likewise.
-- A run deleted by the task's cascade finds no task any more and adds
-- nothing: the task's trigger added it.
CREATE OR REPLACE FUNCTION ai_tasks_roll_up_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_roll_up_runs(ARRAY[OLD.id], NULL);
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_roll_up_usage BEFORE DELETE ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_roll_up_usage();

CREATE OR REPLACE FUNCTION task_runs_roll_up_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_roll_up_runs(ARRAY[OLD.task_id], ARRAY[OLD.id]);
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER task_runs_roll_up_usage BEFORE DELETE ON task_runs
    FOR EACH ROW EXECUTE FUNCTION task_runs_roll_up_usage();

-- Finished tasks that ended before p_before, oldest first, at most p_limit,
-- deleted with everything that hangs off them (runs, events, change sets,
-- checkpoints, decisions, inbox items, comments, edges); their usage goes to
-- the rollup by the triggers above. Returns how many went.
CREATE OR REPLACE FUNCTION agentworker_delete_finished_tasks(p_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    WITH gone AS (
        DELETE FROM ai_tasks WHERE id IN (
            SELECT id FROM ai_tasks
            WHERE status IN ('succeeded', 'failed', 'blocked', 'cancelled')
              AND coalesce(finished_at, updated_at) < p_before
            ORDER BY coalesce(finished_at, updated_at)
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;

-- Every project together, for service_role: a run counts once it stopped
-- running, on the UTC day it finished.
CREATE OR REPLACE VIEW usage_daily WITH (security_invoker = true) AS
SELECT day, model, sum(runs)::bigint AS runs, sum(tokens_in)::bigint AS tokens_in,
       sum(tokens_out)::bigint AS tokens_out, sum(cost)::numeric(14, 6) AS cost
FROM (
    SELECT (coalesce(r.finished_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
           coalesce(t.model, 'unknown') AS model, 1 AS runs, r.tokens_in, r.tokens_out, r.cost
    FROM task_runs r
    JOIN ai_tasks t ON t.id = r.task_id
    WHERE r.status NOT IN ('queued', 'running')
    UNION ALL
    SELECT usage_day, model, runs, tokens_in, tokens_out, cost FROM usage_rollup WHERE stopped
) u
GROUP BY 1, 2;

COMMENT ON VIEW usage_daily IS 'Tokens and cost by UTC day and model, every project together, summed on read from finished runs and the rollup of deleted ones.';

-- By project, for apps: runs still running count with what they spent so far.
CREATE OR REPLACE VIEW project_usage_daily WITH (security_invoker = true) AS
SELECT project_id, day, model, sum(runs)::bigint AS runs, sum(tokens_in)::bigint AS tokens_in,
       sum(tokens_out)::bigint AS tokens_out, sum(cost) AS cost
FROM (
    SELECT t.project_id, (coalesce(r.finished_at, r.started_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
           coalesce(t.model, 'unknown') AS model, 1 AS runs, r.tokens_in, r.tokens_out, r.cost
    FROM task_runs r
    JOIN ai_tasks t ON t.id = r.task_id
    UNION ALL
    SELECT project_id, day, model, runs, tokens_in, tokens_out, cost FROM usage_rollup
) u
GROUP BY 1, 2, 3;

COMMENT ON VIEW project_usage_daily IS 'Tokens and cost by project, UTC day and model, read with the caller''s rights: live runs and the rollup of deleted ones.';

-- A task's root is its parent's root, else its own id; a task moved under
-- another parent takes that parent's root. A parent's deletion (which
-- sets parent_task_id NULL) keeps the root.
CREATE OR REPLACE FUNCTION ai_tasks_set_root() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.parent_task_id IS NULL THEN
        NEW.root_task_id := OLD.root_task_id;
        RETURN NEW;
    END IF;
    NEW.root_task_id := coalesce((SELECT root_task_id FROM ai_tasks WHERE id = NEW.parent_task_id), NEW.id);
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_set_root BEFORE INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_set_root();

CREATE OR REPLACE TRIGGER ai_tasks_keep_root BEFORE UPDATE OF parent_task_id, root_task_id ON ai_tasks
    FOR EACH ROW WHEN (NEW.parent_task_id IS DISTINCT FROM OLD.parent_task_id OR NEW.root_task_id IS DISTINCT FROM OLD.root_task_id)
    EXECUTE FUNCTION ai_tasks_set_root();

-- A deleted task's spend stays with its tree while any task of the tree
-- is left; the tree's last task takes the rows with it.
CREATE OR REPLACE FUNCTION ai_tasks_roll_up_tree() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE root_task_id = OLD.root_task_id AND id <> OLD.id) THEN
        INSERT INTO task_tree_rollup (root_task_id, project_id, task_id, tokens_in, tokens_out, cost)
        VALUES (OLD.root_task_id, OLD.project_id, OLD.id, OLD.tokens_in, OLD.tokens_out, OLD.cost)
        ON CONFLICT (root_task_id, task_id) DO NOTHING;
    ELSE
        DELETE FROM task_tree_rollup WHERE root_task_id = OLD.root_task_id;
    END IF;
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_roll_up_tree BEFORE DELETE ON ai_tasks
    FOR EACH ROW WHEN (OLD.root_task_id IS NOT NULL) EXECUTE FUNCTION ai_tasks_roll_up_tree();

-- A task's spend is added to its row of the UTC day as its cost grows: the
-- task's own row, so no task waits on another's.
CREATE OR REPLACE FUNCTION ai_tasks_count_day_spend() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO project_day_spend AS s (project_id, day, task_id, cost)
    VALUES (NEW.project_id, (now() AT TIME ZONE 'UTC')::date, NEW.id, NEW.cost - OLD.cost)
    ON CONFLICT (project_id, day, task_id) DO UPDATE SET cost = s.cost + excluded.cost;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_count_day_spend AFTER UPDATE OF cost ON ai_tasks
    FOR EACH ROW WHEN (NEW.cost > OLD.cost) EXECUTE FUNCTION ai_tasks_count_day_spend();

-- What a project's tasks spent on the current UTC day. plpgsql, not sql:
-- a sql function with its own search_path is planned again at every call,
-- where plpgsql keeps its plans for the session.
CREATE OR REPLACE FUNCTION agentworker_day_spend(p_project_id uuid) RETURNS numeric
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT sum(cost) FROM project_day_spend
                     WHERE project_id = p_project_id AND day = (now() AT TIME ZONE 'UTC')::date), 0);
END
$$;

-- A project's daily cap and what its tasks spent on the current UTC day.
-- The cap is the project's own (project_settings), else p_default when it
-- is above 0; NULL: no cap, and then spent is 0, not summed: every claim
-- calls this, and a busy project's day has a spend row per task.
CREATE OR REPLACE FUNCTION agentworker_day_cap(p_project_id uuid, p_default numeric,
    OUT cap numeric, OUT spent numeric)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    cap := coalesce((SELECT max_cost_usd_per_day FROM project_settings WHERE project_id = p_project_id),
                    nullif(greatest(p_default, 0), 0));
    spent := 0;
    IF cap IS NOT NULL THEN
        spent := agentworker_day_spend(p_project_id);
    END IF;
END
$$;

-- Resumes the tasks paused at their project's daily cap (an open
-- budget_exceeded item) whose project is under its cap again: the cap was
-- raised or the UTC day turned. p_project_id NULL: every project. Tasks
-- another transaction holds are left for the next call. Returns the
-- resumed tasks.
CREATE OR REPLACE FUNCTION agentworker_resume_under_cap(p_default numeric, p_project_id uuid)
RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    FOR v_id IN
        SELECT t.id FROM ai_tasks t
        WHERE t.status = 'paused' AND (p_project_id IS NULL OR t.project_id = p_project_id)
          AND EXISTS (SELECT 1 FROM inbox_items i WHERE i.task_id = t.id AND i.kind = 'await_user_input'
                      AND i.reason = 'budget_exceeded' AND i.status = 'open')
          AND (SELECT c.cap IS NULL OR c.spent < c.cap FROM agentworker_day_cap(t.project_id, p_default) c)
        ORDER BY t.created_at
        FOR UPDATE OF t SKIP LOCKED
    LOOP
        IF agentworker_control_task(v_id, 'resume', NULL, 'system:daily-cap') ->> 'outcome' = 'applied' THEN
            RETURN NEXT v_id;
        END IF;
    END LOOP;
END
$$;

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_roll_up_runs(uuid[], uuid[])',
    'ai_tasks_roll_up_usage()',
    'task_runs_roll_up_usage()',
    'agentworker_delete_finished_tasks(timestamptz, integer)',
    'ai_tasks_count_day_spend()',
    'ai_tasks_set_root()',
    'ai_tasks_roll_up_tree()',
    'agentworker_day_spend(uuid)',
    'agentworker_day_cap(uuid, numeric)',
    'agentworker_resume_under_cap(numeric, uuid)']::regprocedure[]);
REVOKE ALL ON usage_daily, project_usage_daily FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON usage_daily TO service_role;
GRANT SELECT ON project_usage_daily TO authenticated, service_role;
