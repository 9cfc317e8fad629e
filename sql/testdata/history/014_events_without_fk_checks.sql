-- agent_events.task_id loses its foreign key; what the key gave is kept.
--
-- The key's check ran once per event row (a lookup and a share lock of the
-- task row, ~9 µs), ~33 rows per two-call build, and proved nothing the
-- write had not proved already: every insert naming a task updates that
-- task's row in the same statement, under its row lock, or fails. A holder's
-- batch takes its seqs in the fence update (010), which writes nothing when
-- the task is gone; every other writer goes through
-- agent_events_assign_seq, which raises foreign_key_violation for a missing
-- task. Once the row lock is taken a concurrent delete waits for the
-- writer's commit, as it waited for the key's share lock.
--
-- What the key did besides:
-- - ON DELETE CASCADE: a deleted task's events are deleted by
--   ai_tasks_delete_events (statement level, one delete per statement).
-- - TRUNCATE ai_tasks CASCADE emptied agent_events: ai_tasks_truncate_events
--   deletes the events of tasks (project events name no task and stay).
-- - PostgREST embedding (ai_tasks?select=*,agent_events(*) and back): the
--   computed relationships agent_events(ai_tasks) and ai_tasks(agent_events),
--   run with the caller's rights, so row level security still decides.
ALTER TABLE agent_events DROP CONSTRAINT agent_events_task_id_fkey;

CREATE FUNCTION ai_tasks_delete_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events e USING old_rows o WHERE e.task_id = o.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER ai_tasks_delete_events AFTER DELETE ON ai_tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_delete_events();

CREATE FUNCTION ai_tasks_truncate_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events WHERE task_id IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER ai_tasks_truncate_events AFTER TRUNCATE ON ai_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_truncate_events();

-- PostgREST's computed relationships: to-many from a task, to-one from an
-- event. Invoker's rights: a caller embeds only rows its policies show.
CREATE FUNCTION agent_events(ai_tasks) RETURNS SETOF agent_events
LANGUAGE sql STABLE AS $$ SELECT * FROM agent_events WHERE task_id = $1.id $$;
CREATE FUNCTION ai_tasks(agent_events) RETURNS SETOF ai_tasks ROWS 1
LANGUAGE sql STABLE AS $$ SELECT * FROM ai_tasks WHERE id = $1.task_id $$;

DO $$
BEGIN
    REVOKE ALL ON FUNCTION ai_tasks_delete_events(), ai_tasks_truncate_events(),
        agent_events(ai_tasks), ai_tasks(agent_events) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION ai_tasks_delete_events() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION ai_tasks_truncate_events() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION agent_events(ai_tasks) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION ai_tasks(agent_events) SET search_path = %I, pg_temp', current_schema());
    GRANT EXECUTE ON FUNCTION agent_events(ai_tasks), ai_tasks(agent_events) TO authenticated, service_role;
END
$$;
