-- Sealed days: reads and writes of agent_events name the day partitions
-- that can hold their rows.
--
-- created_at is the start of the inserting transaction (now()): a row
-- lands in the day its transaction started, so a day an hour over has no
-- writer left but a transaction of over an hour. That lets a read name the
-- days that can hold its rows, so Postgres plans and locks those
-- partitions only (at 61 days, planning and locking every partition made
-- a project stream's read 30× an empty table's):
--   * A day once ended is sealed (agent_event_days): its partition gets
--     CHECK (xid < x AND id < i), x the xmax of a snapshot and i the id
--     sequence's next value, taken under the partition's exclusive lock,
--     when no writer of the day is left. A project read after a cursor's
--     xid, or of an event id, needs only the days not sealed below it
--     (agentworker_event_floor).
--
-- Also: the deletes of a batch of finished tasks find what goes with them
-- by index.

COMMENT ON COLUMN agent_events.created_at IS 'The partition key; one partition a UTC day (agent_events_pYYYYMMDD), agent_events_default for days without one.';

-- A read's floor (agentworker_event_floor) is no later than the default
-- partition's oldest row: found by this index, the partition being empty
-- but while the leader is away.
CREATE INDEX agent_events_default_created_idx ON agent_events_default (created_at);

-- The day partitions of agent_events, written with them (a read's floor
-- is looked up here, not in the catalog), and their seals: once sealed,
-- every row of the partition has an xid below xid_below and an id below
-- id_below, which its CHECK constraint <partition>_sealed enforces.
CREATE TABLE agent_event_days (
    partition text PRIMARY KEY,
    day       date NOT NULL UNIQUE,
    xid_below xid8,
    id_below  bigint,
    CHECK ((xid_below IS NULL) = (id_below IS NULL))
);
COMMENT ON TABLE agent_event_days IS 'The day partitions of agent_events and their seals: a sealed day''s rows all have an xid below xid_below and an id below id_below (the partition''s CHECK constraint <partition>_sealed), so a read after an xid, or of an id, skips it.';
COMMENT ON COLUMN agent_event_days.xid_below IS 'NULL until sealed; then the xmax of a snapshot taken under the partition''s exclusive lock once its day ended.';
COMMENT ON COLUMN agent_event_days.id_below IS 'NULL until sealed; then the id sequence''s next value, taken under the same lock.';
ALTER TABLE agent_event_days ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON agent_event_days FROM PUBLIC, anon, authenticated, service_role;

-- The days migration 010 made.
INSERT INTO agent_event_days (partition, day) SELECT name, day FROM agentworker_event_partitions();

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

-- Seals each day partition whose day ended an hour ago or more and is not
-- sealed yet: a default-valued row lands in it only from a transaction
-- that started in the day. Under the partition's exclusive lock no writer of it
-- is left; the xmax of a snapshot and the id sequence's next value taken
-- then are above every xid and id it holds, and the CHECK keeps them so (a
-- row written later with an explicit old created_at, or by a transaction
-- that started in the day and ran past the hour, is refused). A day a
-- reader holds for longer than 100 ms is sealed on a later pass. Returns
-- how many it sealed.
CREATE FUNCTION agentworker_seal_event_partitions() RETURNS integer
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

-- The earliest created_at an event with an xid above p_xid, or with the
-- id p_id, can have: the start of the oldest day partition not sealed
-- below them (the day after the newest when all are), or the default
-- partition's oldest row if older; -infinity without partitions. With both
-- NULL: the oldest day not sealed. Seals only ever add up, so a floor read
-- before a statement still bounds the statement's rows.
CREATE FUNCTION agentworker_event_floor(p_xid xid8, p_id bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce(least(
        (coalesce((SELECT min(day) FROM agent_event_days
                   WHERE xid_below IS NULL OR xid_below > p_xid OR id_below > p_id),
                  (SELECT max(day) + 1 FROM agent_event_days))::timestamp AT TIME ZONE 'UTC'),
        (SELECT min(created_at) FROM agent_events_default)), '-infinity')
$$;

-- The tasks (with their projects) that have events with an id above
-- p_after, and the highest id of each: one statement for the SSE hub's
-- sweep, the floor passed as a value of a statement planned with it
-- (EXECUTE … USING), so that only the days not sealed below p_after + 1
-- are planned and locked.
CREATE FUNCTION agentworker_events_since(p_after bigint)
RETURNS TABLE (task_id uuid, project_id uuid, top bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT task_id, project_id, max(id) FROM agent_events
         WHERE id > $1 AND created_at >= $2 GROUP BY task_id, project_id'
        USING p_after, agentworker_event_floor(NULL, p_after + 1);
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

-- What a batch of deleted tasks takes with it is found by index: the
-- inbox items of each task and run (the foreign keys' cascades would scan
-- the table once a row), and the events of the batch, read from every
-- partition's (task_id, seq, created_at) index with the batch's ids as one
-- array (a join with the deleted rows scanned every partition whole).
CREATE INDEX inbox_items_task_idx ON inbox_items (task_id);
CREATE INDEX inbox_items_run_idx ON inbox_items (run_id) WHERE run_id IS NOT NULL;

CREATE OR REPLACE FUNCTION ai_tasks_delete_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events WHERE task_id = ANY (ARRAY(SELECT id FROM old_rows));
    RETURN NULL;
END
$$;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    -- A replaced function keeps its grants but not its settings.
    FOREACH v_fn IN ARRAY ARRAY[
        'agentworker_create_event_partition(date)', 'agentworker_prepare_event_partitions(integer)',
        'agentworker_seal_event_partitions()', 'agentworker_event_floor(xid8, bigint)', 'agentworker_events_since(bigint)',
        'agentworker_drop_event_partition(text, uuid[], interval)', 'ai_tasks_delete_events()']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;
