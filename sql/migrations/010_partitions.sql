-- Bounded tables: agent_events partitioned by day, retention by dropping
-- a day, staged contents that go once a change set is finished, and a usage
-- rollup that outlives the runs it sums.
--
-- agent_events is range-partitioned on created_at, one partition a UTC day
-- (agent_events_pYYYYMMDD), plus agent_events_default for any time no day
-- partition covers, so an insert never fails for want of a partition.
-- created_at is the key because it is what retention asks of a row (how old
-- it is) and every row has it at insert, from its column default: a key
-- taken from the task (its creation time) would keep a task's events
-- together, but a partition's key cannot be set by a trigger (rows are
-- routed before the partition's triggers run), and a paused task's events
-- would then land in a partition retention already dropped.
--
-- Postgres wants the partition key in every unique index, so the keys are
-- (id, created_at), (task_id, seq, created_at) and (task_id, batch,
-- created_at). They are as strong as the old ones:
--   * id comes from one sequence: unique by construction.
--   * seq is taken from ai_tasks.last_seq under the task row's lock
--     (agent_events_assign_seq, or a holder's fenced update), so no two
--     events of a task ever get the same seq, whatever partition they land
--     in; each partition's index proves it within the day and serves every
--     read by (task_id, seq).
--   * batch: a batch is written only when no event of the task holds its key
--     (the writer's NOT EXISTS, under the task row's lock for a holder); the
--     index backs that within a day.
--
-- River's elected leader keeps the partitions (worker: the retention job):
-- agentworker_prepare_event_partitions creates today's and the next days'
-- ahead of time, and gives each day found in the default partition its own
-- partition, moving its rows there. It never runs on a task's path.
--
-- A day is dropped once it is older than the retention and every task with
-- events in it is finished: a plain DETACH (CONCURRENTLY is refused while a
-- default partition exists) under a short lock_timeout, then DROP, in one
-- transaction (agentworker_drop_event_partition).

------------------------------------------------------------------------------
-- Partitioned agent_events
------------------------------------------------------------------------------

ALTER TABLE agent_events RENAME TO agent_events_unpartitioned;
ALTER TABLE agent_events_unpartitioned
    DROP CONSTRAINT agent_events_pkey,
    DROP CONSTRAINT agent_events_task_id_seq_key;
DROP INDEX agent_events_project_xid_idx, agent_events_batch_idx, agent_events_phase_xid_idx, agent_events_log_idx;
-- The id sequence outlives the old table: the new one goes on counting.
ALTER SEQUENCE agent_events_id_seq OWNED BY NONE;
-- The computed relationships name the table's row type; they are made again below.
DROP FUNCTION agent_events(ai_tasks);
DROP FUNCTION ai_tasks(agent_events_unpartitioned);

CREATE TABLE agent_events (
    id          bigint NOT NULL DEFAULT nextval('agent_events_id_seq'),
    task_id     uuid,
    project_id  uuid NOT NULL,
    seq         integer,
    type        text NOT NULL CONSTRAINT agent_events_type_check CHECK (type IN (
                    'agent_phase', 'tool_call', 'file_update', 'self_repair',
                    'log', 'error', 'progress')),
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    batch       uuid,
    PRIMARY KEY (id, created_at),
    CONSTRAINT agent_events_task_id_seq_key UNIQUE (task_id, seq, created_at),
    CONSTRAINT agent_events_check CHECK (task_id IS NULL OR seq IS NOT NULL)
) PARTITION BY RANGE (created_at);

ALTER SEQUENCE agent_events_id_seq OWNED BY agent_events.id;

DO $$
BEGIN
    ALTER TABLE agent_events ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: written values stay compressed with pglz';
END
$$;

COMMENT ON TABLE agent_events IS 'The typed, ordered timeline of each task (and project-level events with no task), partitioned by UTC day of created_at.';
COMMENT ON COLUMN agent_events.task_id IS 'The task, without a foreign key: an insert for a missing task fails with SQLSTATE 23503, deleting a task deletes its events.';
COMMENT ON COLUMN agent_events.seq IS 'Per task, from 1, in commit order for the task whoever writes; always the database''s. Unique per task across partitions: taken from ai_tasks.last_seq under the task row''s lock.';
COMMENT ON COLUMN agent_events.type IS 'agent_phase | tool_call | file_update | self_repair | log | error | progress.';
COMMENT ON COLUMN agent_events.created_at IS 'The partition key: one partition a UTC day (agent_events_pYYYYMMDD), agent_events_default for days without one.';
COMMENT ON COLUMN agent_events.xid IS 'The writing transaction: a project cursor is (xid, id), read below the snapshot''s xmin.';
COMMENT ON COLUMN agent_events.batch IS 'Idempotency key of one write of events, on its first row: a write resent after a lost reply inserts nothing.';

CREATE INDEX agent_events_project_xid_idx ON agent_events (project_id, xid, id);
CREATE UNIQUE INDEX agent_events_batch_idx ON agent_events (task_id, batch, created_at) WHERE batch IS NOT NULL;
CREATE INDEX agent_events_phase_xid_idx ON agent_events (xid) WHERE type = 'agent_phase';
CREATE INDEX agent_events_log_idx ON agent_events (project_id, id) WHERE type = 'log';

CREATE TABLE agent_events_default PARTITION OF agent_events DEFAULT;
COMMENT ON TABLE agent_events_default IS 'Events of a time no day partition covers; the leader moves them into their day''s partition.';

-- The partition of a UTC day: created if missing (true), its rows taken
-- out of the default partition first. The table is built beside the parent
-- and attached, which locks the parent only against other DDL, not against
-- writers and readers (CREATE TABLE … PARTITION OF would lock it whole).
CREATE FUNCTION agentworker_create_event_partition(p_day date) RETURNS boolean
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
    RETURN true;
END
$$;

-- The day partitions of agent_events and the UTC day each holds.
CREATE FUNCTION agentworker_event_partitions()
RETURNS TABLE (name text, day date)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 15), 'YYYYMMDD')
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'agent_events'::regclass AND c.relname ~ '^agent_events_p[0-9]{8}$'
    ORDER BY 2
$$;

-- What the leader runs: today's partition and p_days_ahead more, and one
-- for each day found in the default partition. Returns how many it made.
-- One caller at a time (a lapsed leader and its successor may overlap).
CREATE FUNCTION agentworker_prepare_event_partitions(p_days_ahead integer) RETURNS integer
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
    RETURN v_made;
END
$$;

-- The tasks with events in a day partition, and whether each is finished
-- (succeeded, failed, blocked, cancelled); a task no longer in ai_tasks is
-- not listed (its events go with it).
CREATE FUNCTION agentworker_event_partition_tasks(p_name text)
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
CREATE FUNCTION agentworker_drop_event_partition(p_name text, p_tasks uuid[], p_lock_timeout interval)
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
    RETURN true;
EXCEPTION WHEN object_in_use THEN
    RETURN false;
END
$$;

-- A task of a detached day the caller did not know of (events written into
-- an old day after its tasks were read): a hashed anti-join, one pass over
-- the day's task ids (a day of 24,000 tasks against a 24,000-id array).
CREATE FUNCTION agentworker_event_partition_tasks_detached(p_name text, p_tasks uuid[])
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT e.task_id FROM (SELECT DISTINCT task_id FROM %I WHERE task_id IS NOT NULL) e
         WHERE NOT EXISTS (SELECT 1 FROM unnest($1::uuid[]) k(id) WHERE k.id = e.task_id) LIMIT 1', p_name)
        USING p_tasks;
END
$$;

-- Every row moves over, each into its day's partition (the days made first).
DO $$
DECLARE
    v_day date;
BEGIN
    FOR v_day IN
        SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM agent_events_unpartitioned
        UNION
        SELECT d::date FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                                            (now() AT TIME ZONE 'UTC')::date + 3, interval '1 day') AS d
    LOOP
        PERFORM agentworker_create_event_partition(v_day);
    END LOOP;
END
$$;

INSERT INTO agent_events (id, task_id, project_id, seq, type, payload, created_at, xid, batch)
SELECT id, task_id, project_id, seq, type, payload, created_at, xid, batch FROM agent_events_unpartitioned;

DROP TABLE agent_events_unpartitioned;

-- The triggers of the baseline, on the partitioned table: the row trigger
-- (allowed on a partitioned table since Postgres 13) is cloned onto each
-- partition; the statement trigger with its transition table stays on the
-- parent and sees the rows of every partition a statement wrote.
CREATE TRIGGER agent_events_assign_seq BEFORE INSERT ON agent_events
    FOR EACH ROW
    WHEN (NEW.seq IS NULL OR current_setting('agentworker.seq', true) IS DISTINCT FROM 'statement')
    EXECUTE FUNCTION agent_events_assign_seq();

CREATE TRIGGER agent_events_announce AFTER INSERT ON agent_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION agent_events_announce();

CREATE FUNCTION agent_events(ai_tasks) RETURNS SETOF agent_events
LANGUAGE sql STABLE AS $$ SELECT * FROM agent_events WHERE task_id = $1.id $$;

CREATE FUNCTION ai_tasks(agent_events) RETURNS SETOF ai_tasks ROWS 1
LANGUAGE sql STABLE AS $$ SELECT * FROM ai_tasks WHERE id = $1.task_id $$;

-- Supabase: a partitioned table is published through its root
-- (publish_via_partition_root, a setting of the whole publication), so
-- postgres_changes subscribers of agent_events see every partition's rows
-- under its name; every partition keeps full row images, as the table did.
DO $$
DECLARE
    v regclass;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'supabase_realtime') THEN
        ALTER TABLE agent_events REPLICA IDENTITY FULL;
        FOR v IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'agent_events'::regclass LOOP
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', v);
        END LOOP;
        ALTER PUBLICATION supabase_realtime SET (publish_via_partition_root = true);
        IF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                       WHERE pubname = 'supabase_realtime'
                         AND schemaname = current_schema()
                         AND tablename = 'agent_events') THEN
            EXECUTE format('ALTER PUBLICATION supabase_realtime ADD TABLE %I.agent_events', current_schema());
        END IF;
    END IF;
END
$$;

ALTER TABLE agent_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_events_default ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON agent_events, agent_events_default FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON agent_events TO authenticated, service_role;
CREATE POLICY agent_events_service ON agent_events TO service_role USING (true) WITH CHECK (true);
CREATE POLICY agent_events_read_own ON agent_events FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

------------------------------------------------------------------------------
-- Staged contents of finished change sets
------------------------------------------------------------------------------

-- A finished change set keeps only what the console's diff shows: an
-- applied set its entries' contents and priors (after and before), without
-- the checkpoint's view (cp_*), which only a resumed attempt of an open set
-- reads; a discarded set keeps nothing (FinishChangeSet already drops the
-- entries when the worker discards; this covers a set discarded by a task
-- that ended while paused, and any other writer).
CREATE FUNCTION change_sets_drop_staged() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status = 'discarded' THEN
        DELETE FROM change_set_entries WHERE task_id = NEW.task_id;
    ELSE
        UPDATE change_set_entries SET cp = false, cp_op = NULL, cp_content = NULL, cp_from_path = NULL
        WHERE task_id = NEW.task_id AND (cp OR cp_content IS NOT NULL);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER change_sets_drop_staged AFTER UPDATE OF status ON change_sets
    FOR EACH ROW WHEN (NEW.status IN ('applied', 'discarded') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION change_sets_drop_staged();

------------------------------------------------------------------------------
-- Usage that outlives its runs
------------------------------------------------------------------------------

-- usage_rollup holds what deleted runs spent, grouped as the usage views
-- group: a run's row is added to it in the transaction that deletes the
-- run, by the trigger below, and the views read rollup and live runs
-- together. A deleted run is in one or the other, never both.
CREATE TABLE usage_rollup (
    project_id uuid NOT NULL,
    day        date NOT NULL,
    usage_day  date NOT NULL,
    model      text NOT NULL,
    stopped    boolean NOT NULL,
    runs       bigint NOT NULL DEFAULT 0,
    tokens_in  bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    cost       numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, day, usage_day, model, stopped)
);

COMMENT ON TABLE usage_rollup IS 'What deleted runs spent, by project, day and model: added in the transaction that deletes them, read by the usage views with the live runs.';
COMMENT ON COLUMN usage_rollup.day IS 'UTC day of the run''s finish, else start, else creation (project_usage_daily''s day).';
COMMENT ON COLUMN usage_rollup.usage_day IS 'UTC day of the run''s finish, else creation (usage_daily''s day).';
COMMENT ON COLUMN usage_rollup.stopped IS 'The runs had stopped running (usage_daily counts only those).';

ALTER TABLE usage_rollup ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON usage_rollup FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON usage_rollup TO authenticated, service_role;
CREATE POLICY usage_rollup_service ON usage_rollup TO service_role USING (true);
CREATE POLICY usage_rollup_read_own ON usage_rollup FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

-- Adds the runs of p_tasks (or, with p_runs, those runs only) to the rollup.
CREATE FUNCTION agentworker_roll_up_runs(p_tasks uuid[], p_runs uuid[]) RETURNS void
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
CREATE FUNCTION ai_tasks_roll_up_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_roll_up_runs(ARRAY[OLD.id], NULL);
    RETURN OLD;
END
$$;

CREATE TRIGGER ai_tasks_roll_up_usage BEFORE DELETE ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_roll_up_usage();

CREATE FUNCTION task_runs_roll_up_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_roll_up_runs(ARRAY[OLD.task_id], ARRAY[OLD.id]);
    RETURN OLD;
END
$$;

CREATE TRIGGER task_runs_roll_up_usage BEFORE DELETE ON task_runs
    FOR EACH ROW EXECUTE FUNCTION task_runs_roll_up_usage();

-- Finished tasks that ended before p_before, oldest first, at most p_limit,
-- deleted with everything that hangs off them (runs, events, change sets,
-- checkpoints, decisions, inbox items, comments, edges); their usage goes to
-- the rollup by the triggers above. Returns how many went.
CREATE FUNCTION agentworker_delete_finished_tasks(p_before timestamptz, p_limit integer) RETURNS integer
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

CREATE INDEX ai_tasks_finished_idx ON ai_tasks (coalesce(finished_at, updated_at))
    WHERE status IN ('succeeded', 'failed', 'blocked', 'cancelled');

DROP VIEW usage_daily;
DROP VIEW project_usage_daily;

CREATE VIEW usage_daily WITH (security_invoker = true) AS
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

CREATE VIEW project_usage_daily WITH (security_invoker = true) AS
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

REVOKE ALL ON usage_daily, project_usage_daily FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON usage_daily TO service_role;
GRANT SELECT ON project_usage_daily TO authenticated, service_role;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'agentworker_create_event_partition(date)', 'agentworker_event_partitions()',
        'agentworker_prepare_event_partitions(integer)', 'agentworker_event_partition_tasks(text)',
        'agentworker_drop_event_partition(text, uuid[], interval)',
        'agentworker_event_partition_tasks_detached(text, uuid[])',
        'agent_events(ai_tasks)', 'ai_tasks(agent_events)',
        'change_sets_drop_staged()', 'agentworker_roll_up_runs(uuid[], uuid[])',
        'ai_tasks_roll_up_usage()', 'task_runs_roll_up_usage()',
        'agentworker_delete_finished_tasks(timestamptz, integer)']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;

GRANT EXECUTE ON FUNCTION agent_events(ai_tasks), ai_tasks(agent_events) TO authenticated, service_role;
