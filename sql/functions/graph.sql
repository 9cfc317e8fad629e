-- The task graph: agents a task runs as, dependencies that hold a task
-- until what it depends on succeeded (or block it when that fails), the
-- children a cancelled parent takes with it, and a plan expanded into
-- tasks.

-- An agent and a parent belong to the task's project; an agent is enabled.
CREATE OR REPLACE FUNCTION ai_tasks_check_refs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_project uuid;
    v_status  text;
BEGIN
    IF NEW.agent_id IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.agent_id IS DISTINCT FROM OLD.agent_id) THEN
        SELECT project_id, status INTO v_project, v_status FROM agents WHERE id = NEW.agent_id;
        IF NOT FOUND OR v_project <> NEW.project_id THEN
            RAISE EXCEPTION 'INVALID_ASSIGNEE: agent % is not an agent of project %', NEW.agent_id, NEW.project_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_agent';
        END IF;
        IF v_status <> 'enabled' THEN
            RAISE EXCEPTION 'INVALID_ASSIGNEE: agent % is disabled', NEW.agent_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_agent';
        END IF;
    END IF;
    IF NEW.parent_task_id IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.parent_task_id IS DISTINCT FROM OLD.parent_task_id) THEN
        IF NEW.parent_task_id = NEW.id
           OR NOT EXISTS (SELECT 1 FROM ai_tasks WHERE id = NEW.parent_task_id AND project_id = NEW.project_id) THEN
            RAISE EXCEPTION 'INVALID_PARENT_TASK: task % is not another task of project %', NEW.parent_task_id, NEW.project_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_parent';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_check_refs BEFORE INSERT OR UPDATE OF agent_id, parent_task_id ON ai_tasks
    FOR EACH ROW WHEN (NEW.agent_id IS NOT NULL OR NEW.parent_task_id IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_check_refs();

-- An agent with unfinished tasks stays.
CREATE OR REPLACE FUNCTION agents_guard_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE agent_id = OLD.id
               AND status NOT IN ('succeeded', 'failed', 'blocked', 'cancelled')) THEN
        RAISE EXCEPTION 'AGENT_HAS_TASKS: agent % has unfinished tasks', OLD.id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'agents_tasks';
    END IF;
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER agents_guard_delete BEFORE DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_guard_delete();

-- The rules of a new edge, checked under a per-project lock so that two
-- transactions cannot close a cycle between them: both tasks exist in one
-- project, the dependent has not started, and the edge closes no cycle.
-- The dependency's row is share-locked, so it cannot finish unseen before
-- this transaction commits. A dependent still queued starts waiting and
-- loses its job; one whose dependency already failed is blocked.
CREATE OR REPLACE FUNCTION task_dependencies_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_task ai_tasks;
    v_dep  ai_tasks;
BEGIN
    -- A snapshot taken before another transaction's edges committed
    -- cannot see the cycle they close with this one, lock or not.
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: dependencies are added at READ COMMITTED, not %: a transaction''s snapshot cannot see the edges that would close a cycle with this one', upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;
    IF NEW.task_id = NEW.depends_on_task_id THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: task % cannot depend on itself', NEW.task_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;
    -- The project's lock first, then the rows: two transactions adding
    -- edges in one project take their turns instead of deadlocking.
    PERFORM pg_advisory_xact_lock(hashtextextended('agentworker.task_graph/' || t.project_id::text, 0))
    FROM ai_tasks t WHERE t.id = NEW.task_id;
    SELECT * INTO v_task FROM ai_tasks WHERE id = NEW.task_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: task % does not exist', NEW.task_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;
    SELECT * INTO v_dep FROM ai_tasks WHERE id = NEW.depends_on_task_id FOR SHARE;
    IF NOT FOUND OR v_dep.project_id <> v_task.project_id THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: task % is not a task of project %', NEW.depends_on_task_id, v_task.project_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;
    IF v_task.status NOT IN ('queued', 'waiting', 'paused') OR v_task.attempt > 0 THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: task % has started (%); dependencies are added before a task starts', NEW.task_id, v_task.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;
    NEW.project_id := v_task.project_id;

    IF EXISTS (
        WITH RECURSIVE upstream(id) AS (
            SELECT NEW.depends_on_task_id
            UNION
            SELECT d.depends_on_task_id FROM task_dependencies d JOIN upstream u ON d.task_id = u.id
        )
        SELECT 1 FROM upstream WHERE id = NEW.task_id) THEN
        RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: task % depending on task % closes a cycle', NEW.task_id, NEW.depends_on_task_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
    END IF;

    IF v_dep.status <> 'succeeded' AND v_task.status = 'queued' THEN
        -- The job made at insert is not visible to any worker yet (same
        -- transaction); a later one may have been fetched, and its claim
        -- finds the task waiting and does nothing.
        DELETE FROM river_job
        WHERE kind = 'ai_task' AND args ->> 'task_id' = v_task.id::text AND state IN ('available', 'scheduled', 'retryable');
        UPDATE ai_tasks SET status = 'waiting', updated_at = now() WHERE id = v_task.id;
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (v_task.id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', 'waiting', 'status', 'waiting', 'taskType', v_task.type,
            'summary', format('waiting for task %s', v_dep.id)));
        v_task.status := 'waiting';
    END IF;
    IF v_dep.status IN ('failed', 'cancelled', 'blocked') AND v_task.status = 'waiting' THEN
        PERFORM agentworker_block_dependent(v_task.id, v_dep);
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER task_dependencies_check BEFORE INSERT ON task_dependencies
    FOR EACH ROW EXECUTE FUNCTION task_dependencies_check();

-- A waiting task whose dependency ended without success is blocked, with an
-- error naming the dependency.
CREATE OR REPLACE FUNCTION agentworker_block_dependent(p_task_id uuid, p_dep ai_tasks) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_task ai_tasks;
BEGIN
    -- A sibling cancelled with its parent: the parent's cancel is on its way.
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE id = p_task_id
               AND parent_task_id::text = current_setting('agentworker.cancelling_parent', true)) THEN
        RETURN;
    END IF;
    UPDATE ai_tasks SET status = 'blocked', updated_at = now(), finished_at = now(),
        error = jsonb_build_object('code', 'dependency_failed',
            'message', format('dependency %s ended %s', p_dep.id, p_dep.status),
            'recoverable', true, 'dependency', p_dep.id)
    WHERE id = p_task_id AND status = 'waiting'
    RETURNING * INTO v_task;
    IF FOUND THEN
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (v_task.id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', 'blocked', 'status', 'blocked', 'taskType', v_task.type,
            'summary', format('dependency %s ended %s', p_dep.id, p_dep.status)));
    END IF;
END
$$;

-- When a task that others depend on changes status, its dependents follow:
--   succeeded                      a waiting dependent whose dependencies
--                                  have all succeeded is queued (and gets
--                                  its job from ai_tasks_requeue);
--   failed, cancelled, blocked     waiting dependents are blocked (and
--                                  theirs in turn, by this same trigger);
--   back from those to queued or   dependents it blocked wait again (and
--   waiting (a retry)              theirs in turn), unless another of their
--                                  dependencies still ended without
--                                  success: they stay blocked, by that one.
CREATE OR REPLACE FUNCTION ai_tasks_release_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_id    uuid;
    v_other ai_tasks;
BEGIN
    IF NEW.status = 'succeeded' THEN
        -- Each waiting dependent is locked first and its dependencies are
        -- counted after, in a statement of their own: when two of them
        -- succeed in overlapping transactions, the second waits for the
        -- first's lock, and its count then sees the first's success. (In
        -- one statement both counted the other as running, and neither
        -- queued the dependent.)
        FOR v_id IN
            SELECT t.id FROM task_dependencies d JOIN ai_tasks t ON t.id = d.task_id
            WHERE d.depends_on_task_id = NEW.id AND t.status = 'waiting'
            ORDER BY t.id
            FOR UPDATE OF t
        LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM task_dependencies o JOIN ai_tasks u ON u.id = o.depends_on_task_id
                                  WHERE o.task_id = v_id AND u.status <> 'succeeded');
            UPDATE ai_tasks SET status = 'queued', updated_at = now() WHERE id = v_id AND status = 'waiting';
            INSERT INTO agent_events (task_id, project_id, type, payload)
            SELECT t.id, t.project_id, 'agent_phase', jsonb_build_object(
                'phase', 'queued', 'status', 'queued', 'taskType', t.type,
                'summary', format('dependency %s succeeded; every dependency has', NEW.id))
            FROM ai_tasks t WHERE t.id = v_id;
        END LOOP;
    ELSIF NEW.status IN ('failed', 'cancelled', 'blocked') THEN
        FOR v_id IN
            SELECT d.task_id FROM task_dependencies d WHERE d.depends_on_task_id = NEW.id
        LOOP
            PERFORM agentworker_block_dependent(v_id, NEW);
        END LOOP;
    ELSE
        FOR v_id IN
            SELECT t.id FROM task_dependencies d JOIN ai_tasks t ON t.id = d.task_id
            WHERE d.depends_on_task_id = NEW.id AND t.status = 'blocked'
              AND t.error ->> 'code' = 'dependency_failed' AND t.error ->> 'dependency' = NEW.id::text
            FOR UPDATE OF t
        LOOP
            -- Another dependency still ended without success: the dependent
            -- stays blocked, by that one now.
            SELECT u.* INTO v_other FROM task_dependencies o JOIN ai_tasks u ON u.id = o.depends_on_task_id
            WHERE o.task_id = v_id AND u.id <> NEW.id AND u.status IN ('failed', 'cancelled', 'blocked')
            ORDER BY o.created_at, u.id LIMIT 1;
            IF FOUND THEN
                UPDATE ai_tasks SET updated_at = now(),
                    error = jsonb_build_object('code', 'dependency_failed',
                        'message', format('dependency %s ended %s', v_other.id, v_other.status),
                        'recoverable', true, 'dependency', v_other.id)
                WHERE id = v_id;
                CONTINUE;
            END IF;
            UPDATE ai_tasks SET status = 'waiting', error = NULL, finished_at = NULL, updated_at = now() WHERE id = v_id;
            INSERT INTO agent_events (task_id, project_id, type, payload)
            SELECT t.id, t.project_id, 'agent_phase', jsonb_build_object(
                'phase', 'waiting', 'status', 'waiting', 'taskType', t.type,
                'summary', format('dependency %s is running again', NEW.id))
            FROM ai_tasks t WHERE t.id = v_id;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_release_dependents AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'blocked')
                       OR (OLD.status IN ('failed', 'cancelled', 'blocked') AND NEW.status IN ('queued', 'waiting')))
    EXECUTE FUNCTION ai_tasks_release_dependents();

-- A task moved to queued while a dependency has not succeeded (a retry of
-- a blocked dependent, a resume) waits instead: only its last dependency's
-- success queues it. A BEFORE trigger after the guard (triggers fire in
-- name order), so the move it makes is the legal one the guard checked.
CREATE OR REPLACE FUNCTION ai_tasks_hold_for_dependencies() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM task_dependencies d JOIN ai_tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = NEW.id AND u.status <> 'succeeded') THEN
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_hold_for_dependencies BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status NOT IN ('queued', 'running', 'waiting'))
    EXECUTE FUNCTION ai_tasks_hold_for_dependencies();

-- Deleting a task that others depend on is refused, unless they go in the
-- same statement; the edges of deleted dependencies go with them.
CREATE OR REPLACE FUNCTION ai_tasks_delete_dependencies() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v record;
BEGIN
    SELECT d.task_id, d.depends_on_task_id INTO v
    FROM task_dependencies d JOIN old_rows o ON o.id = d.depends_on_task_id
    WHERE NOT EXISTS (SELECT 1 FROM old_rows x WHERE x.id = d.task_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'TASK_HAS_DEPENDENTS: task % is a dependency of task %', v.depends_on_task_id, v.task_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ai_tasks_dependents';
    END IF;
    DELETE FROM task_dependencies d USING old_rows o WHERE d.depends_on_task_id = o.id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_delete_dependencies AFTER DELETE ON ai_tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_delete_dependencies();

-- Cancelling a task cancels its unfinished children, through the control
-- function (same state machine, same audit): every child in a status the
-- state machine lets a cancel leave, so a status added later is covered.
CREATE OR REPLACE FUNCTION ai_tasks_cancel_children() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_id   uuid;
    v_prev text := coalesce(current_setting('agentworker.cancelling_parent', true), '');
BEGIN
    -- While the children go, one cancelled before its waiting sibling does
    -- not block that sibling (agentworker_block_dependent): it is cancelled
    -- too.
    PERFORM set_config('agentworker.cancelling_parent', NEW.id::text, true);
    FOR v_id IN
        SELECT id FROM ai_tasks
        WHERE parent_task_id = NEW.id
          AND status IN (SELECT from_status FROM agentworker_task_transitions WHERE to_status = 'cancelled')
    LOOP
        PERFORM agentworker_control_task(v_id, 'cancel', NULL, format('parent task %s', NEW.id));
    END LOOP;
    PERFORM set_config('agentworker.cancelling_parent', v_prev, true);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_cancel_children AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status <> 'cancelled')
    EXECUTE FUNCTION ai_tasks_cancel_children();

-- The tasks a plan planned become its children, with their dependencies, in
-- the transaction that records the plan's success: under the holder's fence
-- (a stale holder's call raises, and its transaction creates nothing), and
-- once (a plan that has its children already gets no second set).
-- p_tasks: [{"key", "title", "prompt", "type", "agent_id", "priority",
-- "depends_on": [key]}], keys unique, dependencies among them acyclic (the
-- dependency trigger refuses a cycle anyway). p_trace_parent, the span of
-- the plan's attempt, is each child's trace_parent (their trace id is the
-- plan's), so a trace shows the children's attempts under the plan's.
-- Returns the children made.
DROP FUNCTION IF EXISTS agentworker_expand_plan(uuid, bigint, jsonb);
CREATE OR REPLACE FUNCTION agentworker_expand_plan(p_parent uuid, p_fence bigint, p_tasks jsonb, p_trace_parent text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_parent ai_tasks;
    v_ids    jsonb := '{}';
    v        record;
    v_id     uuid;
    v_dep    text;
    v_n      integer := 0;
BEGIN
    SELECT * INTO v_parent FROM ai_tasks WHERE id = p_parent AND fence = p_fence AND status = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'expand the plan of task %: it is no longer held under fence %', p_parent, p_fence
            USING ERRCODE = 'AWFEN';
    END IF;
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE parent_task_id = p_parent AND input ? 'planned_task') THEN
        RETURN 0;
    END IF;
    FOR v IN SELECT * FROM jsonb_to_recordset(p_tasks) AS x(key text, title text, prompt text, type text, agent_id uuid, priority integer)
    LOOP
        INSERT INTO ai_tasks (project_id, type, prompt, input, priority, agent_id, parent_task_id, trace_parent)
        VALUES (v_parent.project_id, v.type, v.prompt,
                jsonb_build_object('planned_task', jsonb_build_object('plan_task_id', p_parent, 'key', v.key, 'title', v.title)),
                coalesce(v.priority, 2), v.agent_id, p_parent, nullif(p_trace_parent, ''))
        RETURNING id INTO v_id;
        v_ids := v_ids || jsonb_build_object(v.key, v_id);
        v_n := v_n + 1;
    END LOOP;
    FOR v IN SELECT * FROM jsonb_to_recordset(p_tasks) AS x(key text, depends_on text[])
    LOOP
        FOREACH v_dep IN ARRAY coalesce(v.depends_on, '{}') LOOP
            IF NOT v_ids ? v_dep THEN
                RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: planned task % depends on %, which the plan does not have', v.key, v_dep
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
            END IF;
            INSERT INTO task_dependencies (task_id, depends_on_task_id)
            VALUES ((v_ids ->> v.key)::uuid, (v_ids ->> v_dep)::uuid);
        END LOOP;
    END LOOP;
    RETURN v_n;
END
$$;

-- The reconciler's backstop: a task waiting for longer than p_min_age
-- whose dependencies have all succeeded (a release the triggers above
-- missed) is queued, by the same move, with its event and its job. Returns
-- the tasks it queued: it never should.
CREATE OR REPLACE FUNCTION agentworker_release_stranded(p_min_age interval, p_limit integer) RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    FOR v_id IN
        SELECT t.id FROM ai_tasks t
        WHERE t.status = 'waiting' AND t.updated_at < now() - p_min_age
          AND NOT EXISTS (SELECT 1 FROM task_dependencies o JOIN ai_tasks u ON u.id = o.depends_on_task_id
                          WHERE o.task_id = t.id AND u.status <> 'succeeded')
        ORDER BY t.updated_at, t.id
        LIMIT p_limit
        FOR UPDATE OF t SKIP LOCKED
    LOOP
        UPDATE ai_tasks SET status = 'queued', updated_at = now() WHERE id = v_id AND status = 'waiting';
        INSERT INTO agent_events (task_id, project_id, type, payload)
        SELECT t.id, t.project_id, 'agent_phase', jsonb_build_object(
            'phase', 'queued', 'status', 'queued', 'taskType', t.type,
            'summary', 'every dependency had succeeded; queued by the reconciler')
        FROM ai_tasks t WHERE t.id = v_id;
        RETURN NEXT v_id;
    END LOOP;
END
$$;

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'ai_tasks_check_refs()',
    'agents_guard_delete()',
    'task_dependencies_check()',
    'agentworker_block_dependent(uuid, ai_tasks)',
    'ai_tasks_release_dependents()',
    'ai_tasks_hold_for_dependencies()',
    'ai_tasks_delete_dependencies()',
    'ai_tasks_cancel_children()',
    'agentworker_expand_plan(uuid, bigint, jsonb, text)',
    'agentworker_release_stranded(interval, integer)']::regprocedure[]);
