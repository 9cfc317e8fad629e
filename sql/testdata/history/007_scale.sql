-- Nothing on a task's path may make every task wait for every other.
--
-- NOTIFY takes one cluster-wide lock in the committing transaction and holds
-- it through the commit's WAL flush, so a NOTIFY in every event write
-- serialises every task's commits. The worker now writes events without
-- notifying and announces them after commit, coalesced, once per process
-- every few milliseconds (events.Announcer). Events written by anyone else
-- (psql, PostgREST, the control functions) are still announced, by a
-- statement-level trigger: one notification per statement, not per row.
--
-- The payload names the tasks and projects with new events, never content:
--   {"tasks": ["<task id>", …], "projects": ["<project id>", …]}
-- A statement touching more tasks than fit in one payload (Postgres caps it
-- at 8000 bytes) sends several. Listeners read from their own cursor, so a
-- merged or lost announcement costs latency only.
DROP TRIGGER agent_events_notify ON agent_events;
DROP FUNCTION agent_events_notify();

-- agentworker_announce_payloads splits task/project pairs into payloads
-- that fit NOTIFY's limit (90 pairs: json_agg writes ~40 bytes an id, so
-- at most ~7,300 bytes).
CREATE FUNCTION agentworker_announce_payloads(p_tasks uuid[], p_projects uuid[])
RETURNS SETOF text
LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS $$
    SELECT json_build_object(
               'tasks', coalesce(json_agg(DISTINCT t) FILTER (WHERE t IS NOT NULL), '[]'),
               'projects', json_agg(DISTINCT p))::text
    FROM unnest(p_tasks, p_projects) WITH ORDINALITY AS k(t, p, n)
    GROUP BY (n - 1) / 90
$$;

-- The worker's event inserts set agentworker.announce to 'after_commit' for
-- their own statement (sql.InsertEvents); the trigger consumes the mark, so
-- a later statement of the same transaction is announced as usual.
CREATE FUNCTION agent_events_announce() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_payload text;
BEGIN
    IF current_setting('agentworker.announce', true) = 'after_commit' THEN
        PERFORM set_config('agentworker.announce', '', true);
        RETURN NULL;
    END IF;
    FOR v_payload IN
        SELECT agentworker_announce_payloads(array_agg(task_id), array_agg(project_id))
        FROM (SELECT DISTINCT task_id, project_id FROM new_rows) k
        HAVING count(*) > 0
    LOOP
        PERFORM pg_notify('agent_events', v_payload);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_events_announce AFTER INSERT ON agent_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION agent_events_announce();

-- Pickup: one statement inserting many tasks makes their jobs in one insert
-- and notifies River's insert channel once, not once per row.
DROP TRIGGER ai_tasks_enqueue ON ai_tasks;
CREATE OR REPLACE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    -- Submit from Go inserts the job itself with River's InsertTx.
    IF coalesce(current_setting('agentworker.skip_enqueue', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
    SELECT jsonb_build_object('task_id', n.id), 'ai_task', 'ai_tasks', 5, 1, 'available'
    FROM new_rows n WHERE n.status = 'queued';
    IF FOUND THEN
        PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER ai_tasks_enqueue AFTER INSERT ON ai_tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_enqueue();

-- Usage: no row shared between tasks is updated on a task's path. Every
-- run's tokens and cost stay on its own task_runs row; usage_daily is now a
-- view aggregating them on read (security_invoker: a reader sees the runs
-- its row level security lets it see). A run counts once it stopped
-- running, on the UTC day it finished.
DROP TRIGGER task_runs_usage_rollup ON task_runs;
DROP FUNCTION task_runs_usage_rollup();
DROP TABLE usage_daily;

CREATE INDEX task_runs_finished_at_idx ON task_runs (finished_at);

CREATE VIEW usage_daily WITH (security_invoker = true) AS
SELECT (coalesce(r.finished_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
       coalesce(t.model, 'unknown') AS model,
       count(*) AS runs,
       sum(r.tokens_in)::bigint AS tokens_in,
       sum(r.tokens_out)::bigint AS tokens_out,
       sum(r.cost)::numeric(14, 6) AS cost
FROM task_runs r
JOIN ai_tasks t ON t.id = r.task_id
WHERE r.status NOT IN ('queued', 'running')
GROUP BY 1, 2;
