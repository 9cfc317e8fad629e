-- Trace ids: the trace of the request that created a task (X-Trace-ID, or
-- an id the API made), kept with the task so its events and its model
-- calls' log lines can name it. Set on insert, by the API or by an app's
-- own INSERT, or taken from the parent task, or left NULL; never changed
-- after.

ALTER TABLE ai_tasks ADD COLUMN trace_id text
    CONSTRAINT ai_tasks_trace_id_check CHECK (trace_id ~ '^[A-Za-z0-9._-]{1,64}$');
COMMENT ON COLUMN ai_tasks.trace_id IS 'The trace of the request that created the task (1-64 of A-Z a-z 0-9 . _ -), or NULL; set on insert, never changed.';

GRANT INSERT (trace_id) ON ai_tasks TO authenticated, service_role;

CREATE FUNCTION ai_tasks_guard_trace_id() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RAISE EXCEPTION 'ai_tasks.trace_id is set when a task is inserted and never changed (task %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_trace_id_immutable';
END
$$;

-- Every writer, the worker included: a trace id names where a task came
-- from, which nothing later changes.
CREATE TRIGGER ai_tasks_guard_trace_id BEFORE UPDATE ON ai_tasks
    FOR EACH ROW WHEN (NEW.trace_id IS DISTINCT FROM OLD.trace_id)
    EXECUTE FUNCTION ai_tasks_guard_trace_id();

-- A child inserted without a trace (a plan's steps, a subtask) takes its
-- parent's: the work one request started keeps one trace.
CREATE FUNCTION ai_tasks_inherit_trace_id() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT p.trace_id INTO NEW.trace_id FROM ai_tasks p WHERE p.id = NEW.parent_task_id;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_inherit_trace_id BEFORE INSERT ON ai_tasks
    FOR EACH ROW WHEN (NEW.trace_id IS NULL AND NEW.parent_task_id IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_inherit_trace_id();

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    -- Internal, as every function of ours.
    FOREACH v_fn IN ARRAY ARRAY['ai_tasks_guard_trace_id()', 'ai_tasks_inherit_trace_id()']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;

-- Rate-limit waits: how long a run waited for the provider's rate limit
-- (its pace, and the waits its refusals asked for), added with the run's
-- tokens and cost by the statements that already write them.
ALTER TABLE task_runs ADD COLUMN rate_limit_wait_ms bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN task_runs.rate_limit_wait_ms IS 'Milliseconds the run''s model calls waited for the provider''s rate limit.';
