-- Events: the per-task seq, the announcements a statement of events makes,
-- the events that go with a deleted task, a task's event id floor, the
-- reads' floor over sealed days, and PostgREST's relationships between
-- tasks and events.

-- seq is always the database's, taken under the task row's lock, so seq
-- order is commit order for one task, whoever writes. A holder's batch of n
-- events takes last_seq+1 … last_seq+n in its own update of the task row
-- (which is also its fence check) and marks the statement with
-- agentworker.seq = 'statement'; the row trigger then leaves the seqs it was
-- given alone. Every other writer's rows get their seq here; a row for a
-- missing task fails with foreign_key_violation.
CREATE OR REPLACE FUNCTION agent_events_assign_seq() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    NEW.seq := NULL;
    IF NEW.task_id IS NOT NULL THEN
        UPDATE ai_tasks SET last_seq = last_seq + 1
        WHERE id = NEW.task_id
        RETURNING last_seq INTO NEW.seq;
        IF NEW.seq IS NULL THEN
            RAISE EXCEPTION 'agent_events: task % does not exist', NEW.task_id
                USING ERRCODE = 'foreign_key_violation';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- The triggers, on the partitioned table: the row trigger
-- (allowed on a partitioned table since Postgres 13) is cloned onto each
-- partition; the statement trigger with its transition table stays on the
-- parent and sees the rows of every partition a statement wrote.
CREATE OR REPLACE TRIGGER agent_events_assign_seq BEFORE INSERT ON agent_events
    FOR EACH ROW
    WHEN (NEW.seq IS NULL OR current_setting('agentworker.seq', true) IS DISTINCT FROM 'statement')
    EXECUTE FUNCTION agent_events_assign_seq();

-- Task/project pairs split into payloads that fit NOTIFY's 8000-byte limit
-- (90 pairs: json_agg writes ~40 bytes an id, so at most ~7,300 bytes).
CREATE OR REPLACE FUNCTION agentworker_announce_payloads(p_tasks uuid[], p_projects uuid[])
RETURNS SETOF text
LANGUAGE sql IMMUTABLE AS $$
    SELECT json_build_object(
               'tasks', coalesce(json_agg(DISTINCT t) FILTER (WHERE t IS NOT NULL), '[]'),
               'projects', json_agg(DISTINCT p))::text
    FROM unnest(p_tasks, p_projects) WITH ORDINALITY AS k(t, p, n)
    GROUP BY (n - 1) / 90
$$;

CREATE OR REPLACE FUNCTION agent_events_announce() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_payload text;
BEGIN
    IF current_setting('agentworker.seq', true) = 'statement' THEN
        PERFORM set_config('agentworker.seq', '', true);
    END IF;
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

CREATE OR REPLACE TRIGGER agent_events_announce AFTER INSERT ON agent_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION agent_events_announce();

-- What a foreign key on agent_events.task_id would do besides checking:
-- a deleted task's events go with it (one delete per statement), and
-- TRUNCATE ai_tasks CASCADE empties the events of tasks (project events name
-- no task and stay).
CREATE OR REPLACE FUNCTION ai_tasks_delete_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events WHERE task_id = ANY (ARRAY(SELECT id FROM old_rows));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_delete_events AFTER DELETE ON ai_tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_delete_events();

CREATE OR REPLACE FUNCTION ai_tasks_truncate_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events WHERE task_id IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_truncate_events AFTER TRUNCATE ON ai_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_truncate_events();

-- Whatever an inserter supplies: the value bounds reads, so only the
-- database may pick it. is_called false: the next id is last_value itself.
CREATE OR REPLACE FUNCTION ai_tasks_set_events_id_floor() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END
        INTO NEW.events_id_floor FROM agent_events_id_seq s;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_set_events_id_floor BEFORE INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_set_events_id_floor();

CREATE OR REPLACE FUNCTION ai_tasks_guard_events_id_floor() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RAISE EXCEPTION 'ai_tasks.events_id_floor is set by the database when a task is inserted and never changed (task %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_events_id_floor_immutable';
END
$$;

-- Every writer, the worker included: a raised floor would hide events.
-- App roles have no column privilege on it either (ai_tasks' privileges
-- are per column, the baseline's section 6).
CREATE OR REPLACE TRIGGER ai_tasks_guard_events_id_floor BEFORE UPDATE OF events_id_floor ON ai_tasks
    FOR EACH ROW WHEN (NEW.events_id_floor IS DISTINCT FROM OLD.events_id_floor)
    EXECUTE FUNCTION ai_tasks_guard_events_id_floor();

-- The earliest created_at an event with an xid above p_xid, or with the
-- id p_id, can have: the start of the oldest day partition not sealed
-- below them (the day after the newest when all are), or the default
-- partition's oldest row if older; -infinity without partitions. With both
-- NULL: the oldest day not sealed. Seals only ever add up, so a floor read
-- before a statement still bounds the statement's rows. plpgsql, not sql:
-- a sql function with its own search_path is never inlined and is planned
-- again at every call (0.5-1 ms on every claim); plpgsql keeps its plans
-- for the session (0.12-0.17 ms).
CREATE OR REPLACE FUNCTION agentworker_event_floor(p_xid xid8, p_id bigint) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(least(
        (coalesce((SELECT min(day) FROM agent_event_days
                   WHERE xid_below IS NULL OR xid_below > p_xid OR id_below > p_id),
                  (SELECT max(day) + 1 FROM agent_event_days))::timestamp AT TIME ZONE 'UTC'),
        (SELECT min(created_at) FROM agent_events_default)), '-infinity');
END
$$;

-- The tasks (with their projects) that have events with an id above
-- p_after, and the highest id of each: one statement for the SSE hub's
-- sweep, the floor passed as a value of a statement planned with it
-- (EXECUTE … USING), so that only the days not sealed below p_after + 1
-- are planned and locked.
CREATE OR REPLACE FUNCTION agentworker_events_since(p_after bigint)
RETURNS TABLE (task_id uuid, project_id uuid, top bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT task_id, project_id, max(id) FROM agent_events
         WHERE id > $1 AND created_at >= $2 GROUP BY task_id, project_id'
        USING p_after, agentworker_event_floor(NULL, p_after + 1);
END
$$;

-- PostgREST's computed relationships (ai_tasks?select=*,agent_events(*) and
-- back): to-many from a task, to-one from an event. Invoker's rights: a
-- caller embeds only rows its policies show.
CREATE OR REPLACE FUNCTION agent_events(ai_tasks) RETURNS SETOF agent_events
LANGUAGE sql STABLE AS $$ SELECT * FROM agent_events WHERE task_id = $1.id $$;

CREATE OR REPLACE FUNCTION ai_tasks(agent_events) RETURNS SETOF ai_tasks ROWS 1
LANGUAGE sql STABLE AS $$ SELECT * FROM ai_tasks WHERE id = $1.task_id $$;

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agent_events_assign_seq()',
    'agentworker_announce_payloads(uuid[], uuid[])',
    'agent_events_announce()',
    'ai_tasks_delete_events()',
    'ai_tasks_truncate_events()',
    'ai_tasks_set_events_id_floor()',
    'ai_tasks_guard_events_id_floor()',
    'agentworker_event_floor(xid8, bigint)',
    'agentworker_events_since(bigint)',
    'agent_events(ai_tasks)',
    'ai_tasks(agent_events)']::regprocedure[]);
GRANT EXECUTE ON FUNCTION
    agent_events(ai_tasks),
    ai_tasks(agent_events)
TO authenticated, service_role;
