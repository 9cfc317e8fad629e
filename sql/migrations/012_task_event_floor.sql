-- A task's event id floor: every event of the task has an id above it, so
-- the task's reads plan only the days not sealed below it
-- (agentworker_event_floor(NULL, events_id_floor + 1)) instead of every
-- day. Set by the database on insert from the event id sequence: an
-- event's id is drawn (nextval, CACHE 1) when the event is inserted, after
-- the task row it names exists, so it is above the sequence's position
-- read at the task's insert. NULL (tasks from before this migration): no
-- bound, every day is read.

ALTER TABLE ai_tasks ADD COLUMN events_id_floor bigint;
COMMENT ON COLUMN ai_tasks.events_id_floor IS 'Every event of the task has an id above this (the event id sequence''s position when the task was inserted), or NULL: no bound. Set by the database on insert, whatever the inserter gave; never changed.';

-- Whatever an inserter supplies: the value bounds reads, so only the
-- database may pick it. is_called false: the next id is last_value itself.
CREATE FUNCTION ai_tasks_set_events_id_floor() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END
        INTO NEW.events_id_floor FROM agent_events_id_seq s;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_set_events_id_floor BEFORE INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_set_events_id_floor();

CREATE FUNCTION ai_tasks_guard_events_id_floor() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RAISE EXCEPTION 'ai_tasks.events_id_floor is set by the database when a task is inserted and never changed (task %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_events_id_floor_immutable';
END
$$;

-- Every writer, the worker included: a raised floor would hide events.
-- App roles have no column privilege on it either (ai_tasks' privileges
-- are per column, 004).
CREATE TRIGGER ai_tasks_guard_events_id_floor BEFORE UPDATE ON ai_tasks
    FOR EACH ROW WHEN (NEW.events_id_floor IS DISTINCT FROM OLD.events_id_floor)
    EXECUTE FUNCTION ai_tasks_guard_events_id_floor();

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    -- Internal, as every function of ours.
    FOREACH v_fn IN ARRAY ARRAY['ai_tasks_set_events_id_floor()', 'ai_tasks_guard_events_id_floor()']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;
