-- agent_events' day partitions: made ahead by the leader, sealed once their
-- day ended, dropped whole once every task with events in them is
-- finished and archived.

-- The partition of a UTC day: created if missing (true), its rows taken
-- out of the default partition first. The table is built beside the parent
-- and attached, which locks the parent only against other DDL, not against
-- writers and readers (CREATE TABLE … PARTITION OF would lock it whole).
CREATE OR REPLACE FUNCTION agentworker_create_event_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := 'agent_events_p' || to_char(p_day, 'YYYYMMDD');
    v_from timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_to   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(quote_ident(v_name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE agent_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING COMPRESSION)', v_name);
    -- Attaching proves the range with this check instead of a scan.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L)',
                   v_name, v_name || '_range', v_from, v_to);
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', v_name);
    EXECUTE format('REVOKE ALL ON %I FROM PUBLIC, anon, authenticated, service_role', v_name);
    -- Supabase publishes agent_events with full row images (below).
    IF (SELECT relreplident FROM pg_class WHERE oid = 'agent_events'::regclass) = 'f' THEN
        EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', v_name);
    END IF;
    EXECUTE format('WITH moved AS (DELETE FROM agent_events_default WHERE created_at >= %L AND created_at < %L RETURNING *)
                    INSERT INTO %I SELECT * FROM moved', v_from, v_to, v_name);
    EXECUTE format('ALTER TABLE agent_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', v_name, v_from, v_to);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', v_name, v_name || '_range');
    INSERT INTO agent_event_days (partition, day) VALUES (v_name, p_day);
    RETURN true;
END
$$;

-- The day partitions of agent_events and the UTC day each holds.
CREATE OR REPLACE FUNCTION agentworker_event_partitions()
RETURNS TABLE (name text, day date)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 15), 'YYYYMMDD')
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'agent_events'::regclass AND c.relname ~ '^agent_events_p[0-9]{8}$'
    ORDER BY 2
$$;

-- Seals each day partition whose day ended an hour ago or more and is not
-- sealed yet: a default-valued row lands in it only from a transaction
-- that started in the day. Under the partition's exclusive lock no writer of it
-- is left; the xmax of a snapshot and the id sequence's next value taken
-- then are above every xid and id it holds, and the CHECK keeps them so (a
-- row written later with an explicit old created_at, or by a transaction
-- that started in the day and ran past the hour, is refused). A day a
-- reader holds for longer than 100 ms is sealed on a later pass. Returns
-- how many it sealed.
CREATE OR REPLACE FUNCTION agentworker_seal_event_partitions() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_name   text;
    v_day    date;
    v_below  xid8;
    v_id     bigint;
    v_sealed integer := 0;
    v_lock   text := current_setting('lock_timeout');
BEGIN
    FOR v_name, v_day IN
        SELECT d.partition, d.day FROM agent_event_days d
        WHERE d.xid_below IS NULL
          AND (d.day + 1)::timestamp AT TIME ZONE 'UTC' + interval '1 hour' <= clock_timestamp()
        ORDER BY d.day
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', v_name);
            v_below := pg_snapshot_xmax(pg_current_snapshot());
            SELECT last_value + 1 INTO v_id FROM agent_events_id_seq;
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (xid < %L::xid8 AND id < %s) NOT VALID',
                           v_name, v_name || '_sealed', v_below, v_id);
            UPDATE agent_event_days SET xid_below = v_below, id_below = v_id WHERE partition = v_name;
            v_sealed := v_sealed + 1;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_lock, true);
    RETURN v_sealed;
END
$$;

-- What the leader runs: today's partition and p_days_ahead more, and one
-- for each day found in the default partition. Returns how many it made.
-- One caller at a time (a lapsed leader and its successor may overlap).
CREATE OR REPLACE FUNCTION agentworker_prepare_event_partitions(p_days_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_day   date;
    v_made  integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('agentworker_event_partitions'));
    FOR v_day IN
        SELECT d::date FROM generate_series(v_today, v_today + greatest(p_days_ahead, 0), interval '1 day') AS d
        UNION
        SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM agent_events_default
    LOOP
        IF agentworker_create_event_partition(v_day) THEN
            v_made := v_made + 1;
        END IF;
    END LOOP;
    PERFORM agentworker_seal_event_partitions();
    RETURN v_made;
END
$$;

-- The tasks with events in a day partition, and whether each is finished
-- (succeeded, failed, blocked, cancelled); a task no longer in ai_tasks is
-- not listed (its events go with it).
CREATE OR REPLACE FUNCTION agentworker_event_partition_tasks(p_name text)
RETURNS TABLE (task_id uuid, finished boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM agentworker_event_partitions() p WHERE p.name = p_name) THEN
        RAISE EXCEPTION 'no event partition %', p_name USING ERRCODE = 'undefined_table';
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.id, t.status IN (''succeeded'', ''failed'', ''blocked'', ''cancelled'')
         FROM (SELECT DISTINCT task_id FROM %I WHERE task_id IS NOT NULL) e
         JOIN ai_tasks t ON t.id = e.task_id', p_name);
END
$$;

-- Drops a day partition whose tasks p_tasks (agentworker_event_partition_tasks,
-- read before the archive hook ran) are all still finished: detached and
-- dropped in the caller's transaction, under p_lock_timeout so that a long
-- reader of agent_events delays the drop, never the writers queued behind
-- it. false, with nothing done, when one of the tasks went back to work.
CREATE OR REPLACE FUNCTION agentworker_drop_event_partition(p_name text, p_tasks uuid[], p_lock_timeout interval)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM agentworker_event_partitions() p WHERE p.name = p_name) THEN
        RAISE EXCEPTION 'no event partition %', p_name USING ERRCODE = 'undefined_table';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    EXECUTE format('ALTER TABLE agent_events DETACH PARTITION %I', p_name);
    -- The detached table is still locked: no writer reaches it now.
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE id = ANY (p_tasks)
               AND status NOT IN ('succeeded', 'failed', 'blocked', 'cancelled'))
       OR EXISTS (SELECT 1 FROM agentworker_event_partition_tasks_detached(p_name, p_tasks)) THEN
        RAISE EXCEPTION 'keep %', p_name USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('DROP TABLE %I', p_name);
    DELETE FROM agent_event_days WHERE partition = p_name;
    RETURN true;
EXCEPTION WHEN object_in_use THEN
    RETURN false;
END
$$;

-- A task of a detached day the caller did not know of (events written into
-- an old day after its tasks were read): a hashed anti-join, one pass over
-- the day's task ids (a day of 24,000 tasks against a 24,000-id array).
CREATE OR REPLACE FUNCTION agentworker_event_partition_tasks_detached(p_name text, p_tasks uuid[])
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT e.task_id FROM (SELECT DISTINCT task_id FROM %I WHERE task_id IS NOT NULL) e
         WHERE NOT EXISTS (SELECT 1 FROM unnest($1::uuid[]) k(id) WHERE k.id = e.task_id) LIMIT 1', p_name)
        USING p_tasks;
END
$$;

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_create_event_partition(date)',
    'agentworker_event_partitions()',
    'agentworker_seal_event_partitions()',
    'agentworker_prepare_event_partitions(integer)',
    'agentworker_event_partition_tasks(text)',
    'agentworker_drop_event_partition(text, uuid[], interval)',
    'agentworker_event_partition_tasks_detached(text, uuid[])']::regprocedure[]);

-- Today's partition and three days ahead exist once the functions that make
-- them do (the leader keeps them ahead from then on).
SELECT agentworker_prepare_event_partitions(3);
