-- The events archive: a finished task's timeline is written to object
-- storage as one gzip-compressed JSONL object (package archive) before its
-- agent_events rows are dropped. The task row says where, and through which
-- seq: readers take seq <= events_archived_seq from the object and the rest
-- from agent_events. The archiver writes the object first and marks the row
-- after, so a crash between the two leaves the mark as it was and a re-run
-- rewrites the same key.
ALTER TABLE ai_tasks
    ADD COLUMN events_archive_key  text,
    ADD COLUMN events_archived_seq integer NOT NULL DEFAULT 0,
    ADD COLUMN events_archived_at  timestamptz;
COMMENT ON COLUMN ai_tasks.events_archive_key IS 'Object key of the task''s archived timeline (gzip JSONL, one event a line in seq order), under ARCHIVE_PREFIX; NULL until archived. The worker''s.';
COMMENT ON COLUMN ai_tasks.events_archived_seq IS 'The last seq the archive holds: events up to it are read from the archive once their agent_events rows are gone. The worker''s.';
COMMENT ON COLUMN ai_tasks.events_archived_at IS 'When the archive was last written and marked. The worker''s.';

-- The archive columns are the worker's, as the lease and fence columns are
-- (004): an app that could set them would hide a timeline or point a task
-- at another project's archive. ai_tasks_guard_columns as in 004, with the
-- three columns added.
CREATE OR REPLACE FUNCTION ai_tasks_guard_columns() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_machine boolean := coalesce(current_setting('agentworker.machine', true), '') = 'on';
    v_requeue boolean := coalesce(current_setting('agentworker.requeue', true), '') = 'on';
    v_column  text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_column := CASE
            WHEN NEW.attempt <> 0 THEN 'attempt'
            WHEN NEW.retries <> 0 THEN 'retries'
            WHEN NEW.last_seq <> 0 THEN 'last_seq'
            WHEN NEW.fence <> 0 THEN 'fence'
            WHEN NEW.river_job_id IS NOT NULL THEN 'river_job_id'
            WHEN NEW.lease_owner IS NOT NULL THEN 'lease_owner'
            WHEN NEW.lease_expires_at IS NOT NULL THEN 'lease_expires_at'
            WHEN NEW.events_archive_key IS NOT NULL THEN 'events_archive_key'
            WHEN NEW.events_archived_seq <> 0 THEN 'events_archived_seq'
            WHEN NEW.events_archived_at IS NOT NULL THEN 'events_archived_at'
        END;
        IF v_column IS NOT NULL THEN
            RAISE EXCEPTION 'ai_tasks.% is the worker''s: a task is inserted without it (task %)', v_column, NEW.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
        END IF;
        RETURN NEW;
    END IF;
    IF v_machine THEN
        RETURN NEW;
    END IF;
    v_column := CASE
        WHEN NEW.attempt IS DISTINCT FROM OLD.attempt THEN 'attempt'
        WHEN NEW.retries IS DISTINCT FROM OLD.retries AND NOT v_requeue THEN 'retries'
        WHEN NEW.last_seq IS DISTINCT FROM OLD.last_seq
             AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement' AND pg_trigger_depth() < 2 THEN 'last_seq'
        WHEN NEW.fence IS DISTINCT FROM OLD.fence THEN 'fence'
        WHEN NEW.river_job_id IS DISTINCT FROM OLD.river_job_id THEN 'river_job_id'
        WHEN NEW.lease_owner IS DISTINCT FROM OLD.lease_owner THEN 'lease_owner'
        WHEN NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN 'lease_expires_at'
        WHEN NEW.events_archive_key IS DISTINCT FROM OLD.events_archive_key THEN 'events_archive_key'
        WHEN NEW.events_archived_seq IS DISTINCT FROM OLD.events_archived_seq THEN 'events_archived_seq'
        WHEN NEW.events_archived_at IS DISTINCT FROM OLD.events_archived_at THEN 'events_archived_at'
    END;
    IF v_column IS NOT NULL THEN
        RAISE EXCEPTION 'ai_tasks.% is the worker''s: only the worker changes it (task %)', v_column, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER ai_tasks_guard_columns_insert ON ai_tasks;
DROP TRIGGER ai_tasks_guard_columns ON ai_tasks;
CREATE TRIGGER ai_tasks_guard_columns_insert BEFORE INSERT ON ai_tasks
    FOR EACH ROW WHEN (NEW.attempt <> 0 OR NEW.retries <> 0 OR NEW.last_seq <> 0 OR NEW.fence <> 0
        OR NEW.river_job_id IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_expires_at IS NOT NULL
        OR NEW.events_archive_key IS NOT NULL OR NEW.events_archived_seq <> 0 OR NEW.events_archived_at IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_guard_columns();
CREATE TRIGGER ai_tasks_guard_columns BEFORE UPDATE ON ai_tasks
    FOR EACH ROW WHEN (coalesce(current_setting('agentworker.machine', true), '') <> 'on'
        AND ((NEW.attempt, NEW.retries, NEW.fence, NEW.river_job_id, NEW.lease_owner, NEW.lease_expires_at,
              NEW.events_archive_key, NEW.events_archived_seq, NEW.events_archived_at)
                IS DISTINCT FROM (OLD.attempt, OLD.retries, OLD.fence, OLD.river_job_id, OLD.lease_owner, OLD.lease_expires_at,
                                  OLD.events_archive_key, OLD.events_archived_seq, OLD.events_archived_at)
            OR (NEW.last_seq IS DISTINCT FROM OLD.last_seq AND pg_trigger_depth() = 0
                AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement')))
    EXECUTE FUNCTION ai_tasks_guard_columns();

DO $$
BEGIN
    REVOKE ALL ON FUNCTION ai_tasks_guard_columns() FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION ai_tasks_guard_columns() SET search_path = %I, pg_temp', current_schema());
END
$$;
