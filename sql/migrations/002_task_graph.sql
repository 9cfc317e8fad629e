-- A project's work as a graph: agents that tasks run as, dependencies
-- between tasks (a task waits until every task it depends on succeeded),
-- a priority River works by, and a parent task.

------------------------------------------------------------------------------
-- Agents
------------------------------------------------------------------------------

CREATE TABLE agents (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id uuid NOT NULL,
    name       text NOT NULL CHECK (btrim(name) <> '' AND length(name) <= 100),
    role       text NOT NULL DEFAULT '',
    model      text,
    persona    text NOT NULL DEFAULT '',
    tools      text[],
    status     text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
    version    integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

COMMENT ON TABLE agents IS 'The agents a project''s tasks run as: a persona in every prompt, a model, the tools it may use.';
COMMENT ON COLUMN agents.name IS 'Unique in its project; a plan names agents by it.';
COMMENT ON COLUMN agents.persona IS 'The agent''s persona, in the system prompt of every model call of its tasks.';
COMMENT ON COLUMN agents.model IS 'The model of its tasks that name none; the worker''s LLM_MODEL when NULL.';
COMMENT ON COLUMN agents.tools IS 'The tools it may use, narrowing what its task type allows (never widening it); NULL: all the type allows.';
COMMENT ON COLUMN agents.version IS 'Optimistic version: an update or delete names the version it read.';

------------------------------------------------------------------------------
-- Tasks: agent, priority, parent, waiting
------------------------------------------------------------------------------

ALTER TABLE ai_tasks
    ADD COLUMN agent_id       uuid REFERENCES agents (id) ON DELETE SET NULL,
    ADD COLUMN priority       smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4),
    ADD COLUMN parent_task_id uuid REFERENCES ai_tasks (id) ON DELETE SET NULL;

CREATE INDEX ai_tasks_agent_idx ON ai_tasks (agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX ai_tasks_parent_idx ON ai_tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

COMMENT ON COLUMN ai_tasks.agent_id IS 'The agent the task runs as (an enabled agent of its project).';
COMMENT ON COLUMN ai_tasks.priority IS '1 (most urgent) … 4; River''s job priority, so urgent tasks start first when more are ready than workers.';
COMMENT ON COLUMN ai_tasks.parent_task_id IS 'A task of the same project this one is part of: cancelling it cancels its unfinished children.';

-- waiting: the task has a dependency that has not succeeded yet, and no
-- River job.
ALTER TABLE ai_tasks DROP CONSTRAINT ai_tasks_status_check;
ALTER TABLE ai_tasks ADD CONSTRAINT ai_tasks_status_check CHECK (status IN (
    'queued', 'running', 'succeeded', 'failed', 'blocked',
    'cancelled', 'paused', 'awaiting_input', 'waiting'));

INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('queued', 'waiting'),    -- a dependency is added before the task starts
    ('waiting', 'queued'),    -- its last dependency succeeded
    ('waiting', 'blocked'),   -- a dependency failed, was cancelled or blocked
    ('waiting', 'cancelled'),
    ('waiting', 'paused'),
    ('blocked', 'waiting');   -- the failed dependency is retried

-- An agent and a parent belong to the task's project; an agent is enabled.
CREATE FUNCTION ai_tasks_check_refs() RETURNS trigger
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

CREATE TRIGGER ai_tasks_check_refs BEFORE INSERT OR UPDATE OF agent_id, parent_task_id ON ai_tasks
    FOR EACH ROW WHEN (NEW.agent_id IS NOT NULL OR NEW.parent_task_id IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_check_refs();

-- An agent with unfinished tasks stays.
CREATE FUNCTION agents_guard_delete() RETURNS trigger
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

CREATE TRIGGER agents_guard_delete BEFORE DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_guard_delete();

-- The priority of a task is its River job's.
CREATE OR REPLACE FUNCTION agentworker_enqueue_task(p_task_id uuid) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job_id bigint;
BEGIN
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
    SELECT jsonb_build_object('task_id', p_task_id), 'ai_task', 'ai_tasks', 5, t.priority, 'available'
    FROM ai_tasks t WHERE t.id = p_task_id
    RETURNING id INTO v_job_id;
    PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    RETURN v_job_id;
END
$$;

CREATE OR REPLACE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- Submit from Go inserts the job itself with River's InsertTx.
    IF coalesce(current_setting('agentworker.skip_enqueue', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
    SELECT jsonb_build_object('task_id', n.id), 'ai_task', 'ai_tasks', 5, n.priority, 'available'
    FROM new_rows n WHERE n.status = 'queued';
    IF FOUND THEN
        PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    END IF;
    RETURN NULL;
END
$$;

------------------------------------------------------------------------------
-- Dependencies
------------------------------------------------------------------------------

-- task_dependencies: task_id waits until depends_on_task_id succeeded. Rows
-- come in the task's own transaction, or later while it has not started.
-- depends_on_task_id has no foreign key: deleting a task others depend on is
-- refused with TASK_HAS_DEPENDENTS (ai_tasks_delete_dependencies), which a
-- key's own error could not say.
CREATE TABLE task_dependencies (
    task_id            uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    depends_on_task_id uuid NOT NULL,
    project_id         uuid NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, depends_on_task_id)
);

CREATE INDEX task_dependencies_depends_on_idx ON task_dependencies (depends_on_task_id);

COMMENT ON TABLE task_dependencies IS 'task_id waits (status waiting, no River job) until depends_on_task_id succeeded.';
COMMENT ON COLUMN task_dependencies.project_id IS 'The project of both tasks; set by the database.';

-- The rules of a new edge, checked under a per-project lock so that two
-- transactions cannot close a cycle between them: both tasks exist in one
-- project, the dependent has not started, and the edge closes no cycle.
-- The dependency's row is share-locked, so it cannot finish unseen before
-- this transaction commits. A dependent still queued starts waiting and
-- loses its job; one whose dependency already failed is blocked.
CREATE FUNCTION task_dependencies_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_task ai_tasks;
    v_dep  ai_tasks;
BEGIN
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

CREATE TRIGGER task_dependencies_check BEFORE INSERT ON task_dependencies
    FOR EACH ROW EXECUTE FUNCTION task_dependencies_check();

-- A waiting task whose dependency ended without success is blocked, with an
-- error naming the dependency.
CREATE FUNCTION agentworker_block_dependent(p_task_id uuid, p_dep ai_tasks) RETURNS void
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
--   waiting (a retry)              theirs in turn).
CREATE FUNCTION ai_tasks_release_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_id uuid;
BEGIN
    IF NEW.status = 'succeeded' THEN
        FOR v_id IN
            SELECT t.id FROM task_dependencies d JOIN ai_tasks t ON t.id = d.task_id
            WHERE d.depends_on_task_id = NEW.id AND t.status = 'waiting'
              AND NOT EXISTS (SELECT 1 FROM task_dependencies o JOIN ai_tasks u ON u.id = o.depends_on_task_id
                              WHERE o.task_id = t.id AND u.status <> 'succeeded')
            ORDER BY t.priority, t.created_at
            FOR UPDATE OF t
        LOOP
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

CREATE TRIGGER ai_tasks_release_dependents AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'blocked')
                       OR (OLD.status IN ('failed', 'cancelled', 'blocked') AND NEW.status IN ('queued', 'waiting')))
    EXECUTE FUNCTION ai_tasks_release_dependents();

-- A task moved to queued while a dependency has not succeeded (a retry of
-- a blocked dependent, a resume) waits instead: only its last dependency's
-- success queues it. A BEFORE trigger after the guard (triggers fire in
-- name order), so the move it makes is the legal one the guard checked.
CREATE FUNCTION ai_tasks_hold_for_dependencies() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM task_dependencies d JOIN ai_tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = NEW.id AND u.status <> 'succeeded') THEN
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_hold_for_dependencies BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status NOT IN ('queued', 'running', 'waiting'))
    EXECUTE FUNCTION ai_tasks_hold_for_dependencies();

-- Deleting a task that others depend on is refused, unless they go in the
-- same statement; the edges of deleted dependencies go with them.
CREATE FUNCTION ai_tasks_delete_dependencies() RETURNS trigger
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

CREATE TRIGGER ai_tasks_delete_dependencies AFTER DELETE ON ai_tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_delete_dependencies();

------------------------------------------------------------------------------
-- Control: a waiting task may be cancelled or paused (resumed, it waits
-- again until its dependencies succeeded).
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION agentworker_control_task(
    p_task_id uuid, p_action text, p_expected_version integer DEFAULT NULL,
    p_actor text DEFAULT NULL, p_answer text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_task    ai_tasks%ROWTYPE;
    -- Through PostgREST the caller's JWT names the actor, whatever p_actor says.
    v_actor   text := coalesce(
        'user:' || (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'),
        nullif(p_actor, ''), session_user::text);
    v_target  text;
    v_sources text[];
    v_outcome text;
    v_error   text;
    v_result  jsonb;
    v_pending boolean := false;
    v_withdraw boolean := false;
BEGIN
    SELECT * INTO v_task FROM ai_tasks WHERE id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'not_found', 'task_id', p_task_id, 'action', p_action,
            'error', format('task %s not found', p_task_id));
    END IF;

    CASE p_action
        WHEN 'cancel' THEN v_target := 'cancelled'; v_sources := ARRAY['queued', 'running', 'paused', 'awaiting_input', 'waiting'];
        WHEN 'pause'  THEN v_target := 'paused';    v_sources := ARRAY['queued', 'running', 'waiting'];
        WHEN 'resume' THEN v_target := 'queued';    v_sources := ARRAY['paused'];
        WHEN 'retry'  THEN v_target := 'queued';    v_sources := ARRAY['failed', 'blocked', 'cancelled'];
        WHEN 'answer' THEN v_target := 'queued';    v_sources := ARRAY['awaiting_input'];
        ELSE v_target := NULL;
    END CASE;
    v_withdraw := p_action = 'resume' AND v_task.status = 'running' AND v_task.pause_requested;

    IF v_target IS NULL THEN
        v_outcome := 'invalid';
        v_error := format('unknown action %L: want cancel, pause, resume, retry or answer', p_action);
    ELSIF p_action = 'answer' AND coalesce(btrim(p_answer), '') = '' THEN
        v_outcome := 'invalid';
        v_error := 'an answer is required';
    ELSIF p_expected_version IS NOT NULL AND p_expected_version <> v_task.version THEN
        v_outcome := 'conflict';
        v_error := format('task %s is at version %s, not the expected %s', p_task_id, v_task.version, p_expected_version);
    ELSIF v_withdraw THEN
        v_outcome := 'applied';
    ELSIF NOT (v_task.status = ANY (v_sources))
          OR NOT EXISTS (SELECT 1 FROM agentworker_task_transitions
                         WHERE from_status = v_task.status AND to_status = v_target) THEN
        v_outcome := 'rejected';
        v_error := format('cannot %s a %s task', p_action, v_task.status);
    ELSIF p_action IN ('cancel', 'pause')
          AND EXISTS (SELECT 1 FROM change_sets WHERE task_id = p_task_id AND status = 'applying') THEN
        v_outcome := 'rejected';
        v_error := format('cannot %s task %s: its finished build is being applied to the project', p_action, p_task_id);
    ELSE
        v_outcome := 'applied';
    END IF;

    PERFORM set_config('agentworker.requeue', 'on', true);
    IF v_outcome = 'applied' AND v_withdraw THEN
        -- The loop has not reached its boundary yet: it simply goes on.
        UPDATE ai_tasks SET pause_requested = false, version = version + 1, updated_at = now()
        WHERE id = p_task_id
        RETURNING * INTO v_task;
    ELSIF v_outcome = 'applied' AND p_action = 'pause' AND v_task.status = 'running' THEN
        -- A running loop pauses itself at its next iteration boundary, after
        -- a checkpoint; nothing is stopped mid-call.
        v_pending := true;
        UPDATE ai_tasks SET pause_requested = true, version = version + 1, updated_at = now()
        WHERE id = p_task_id
        RETURNING * INTO v_task;
    ELSIF v_outcome = 'applied' THEN
        IF p_action IN ('cancel', 'pause') THEN
            -- Stop the running loop (or the job that has not started yet).
            IF v_task.river_job_id IS NOT NULL THEN
                PERFORM agentworker_cancel_river_job(v_task.river_job_id);
            END IF;
            UPDATE task_runs SET
                status = CASE WHEN p_action = 'pause' AND status = 'running' THEN 'interrupted' ELSE 'cancelled' END,
                error_code = CASE WHEN p_action = 'pause' THEN 'paused' ELSE 'cancelled' END,
                error_message = format('%s by %s', CASE WHEN p_action = 'pause' THEN 'paused' ELSE 'cancelled' END, v_actor),
                finished_at = coalesce(finished_at, now())
            WHERE task_id = p_task_id
              AND status IN ('queued', 'running', 'retry_scheduled', 'interrupted')
              AND NOT (p_action = 'pause' AND status = 'interrupted');
        END IF;
        IF p_action = 'retry' THEN
            UPDATE ai_tasks SET error = NULL, result = NULL, retries = 0 WHERE id = p_task_id;
        END IF;
        IF p_action = 'resume' THEN
            -- A budget pause is acknowledged by resuming.
            UPDATE inbox_items SET status = 'closed', resolver = v_actor, resolved_at = now(), version = version + 1
            WHERE task_id = p_task_id AND kind = 'await_user_input' AND reason = 'budget' AND status = 'open';
        END IF;
        IF p_action = 'answer' THEN
            UPDATE inbox_items SET status = 'closed', answer = p_answer, resolver = v_actor,
                resolved_at = now(), version = version + 1
            WHERE task_id = p_task_id AND kind = 'await_user_input' AND status = 'open';
        END IF;
        -- The status move; ai_tasks_requeue enqueues a job for a move to queued.
        UPDATE ai_tasks SET status = v_target, version = version + 1, updated_at = now(),
            finished_at = CASE WHEN v_target = 'cancelled' THEN now() ELSE NULL END
        WHERE id = p_task_id
        RETURNING * INTO v_task;
    END IF;
    PERFORM set_config('agentworker.requeue', '', true);

    v_result := jsonb_build_object('outcome', v_outcome, 'task_id', p_task_id, 'action', p_action,
        'from', CASE WHEN v_outcome = 'applied' THEN NULL ELSE v_task.status END,
        'status', v_task.status, 'version', v_task.version, 'error', v_error, 'pending', v_pending);

    -- The audit event: who, what, outcome, whatever the outcome.
    INSERT INTO agent_events (task_id, project_id, type, payload)
    VALUES (p_task_id, v_task.project_id, 'log', jsonb_build_object(
        'level', CASE WHEN v_outcome = 'applied' THEN 'info' ELSE 'warn' END,
        'message', CASE WHEN v_outcome = 'applied'
                        THEN CASE WHEN v_pending
                                  THEN format('pause requested by %s: the task pauses at its next iteration boundary', v_actor)
                                  WHEN v_withdraw
                                  THEN format('resume by %s: the pending pause is withdrawn; the task goes on', v_actor)
                                  ELSE format('%s by %s: task is now %s', p_action, v_actor, v_task.status) END
                        ELSE format('%s by %s refused (%s): %s', p_action, v_actor, v_outcome, v_error) END,
        'metadata', jsonb_build_object('audit', true, 'actor', v_actor, 'action', p_action,
            'outcome', v_outcome, 'status', v_task.status, 'version', v_task.version, 'pending', v_pending,
            'expectedVersion', p_expected_version, 'error', v_error)));

    IF v_outcome = 'applied' AND NOT v_pending AND NOT v_withdraw THEN
        -- The lifecycle event; cancelled is terminal for followers.
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (p_task_id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', CASE p_action WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END,
            'status', v_task.status, 'taskType', v_task.type,
            'summary', format('%s by %s', p_action, v_actor)));
    END IF;
    IF v_outcome = 'applied' THEN
        PERFORM pg_notify('agentworker_control', json_build_object(
            'task_id', p_task_id, 'action', p_action, 'status', v_task.status, 'version', v_task.version,
            'pending', v_pending)::text);
    END IF;
    RETURN v_result;
END
$$;

------------------------------------------------------------------------------
-- Parent
------------------------------------------------------------------------------

-- Cancelling a task cancels its unfinished children, through the control
-- function (same state machine, same audit).
CREATE FUNCTION ai_tasks_cancel_children() RETURNS trigger
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
        WHERE parent_task_id = NEW.id AND status IN ('queued', 'running', 'paused', 'awaiting_input', 'waiting')
    LOOP
        PERFORM agentworker_control_task(v_id, 'cancel', NULL, format('parent task %s', NEW.id));
    END LOOP;
    PERFORM set_config('agentworker.cancelling_parent', v_prev, true);
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_cancel_children AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status <> 'cancelled')
    EXECUTE FUNCTION ai_tasks_cancel_children();

------------------------------------------------------------------------------
-- A plan becomes a graph
------------------------------------------------------------------------------

-- The tasks a plan planned become its children, with their dependencies, in
-- the transaction that records the plan's success: under the holder's fence
-- (a stale holder's call raises, and its transaction creates nothing), and
-- once (a plan that has its children already gets no second set).
-- p_tasks: [{"key", "title", "prompt", "type", "agent_id", "priority",
-- "depends_on": [key]}], keys unique, dependencies among them acyclic (the
-- dependency trigger refuses a cycle anyway). Returns the children made.
CREATE FUNCTION agentworker_expand_plan(p_parent uuid, p_fence bigint, p_tasks jsonb) RETURNS integer
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
        INSERT INTO ai_tasks (project_id, type, prompt, input, priority, agent_id, parent_task_id)
        VALUES (v_parent.project_id, v.type, v.prompt,
                jsonb_build_object('planned_task', jsonb_build_object('plan_task_id', p_parent, 'key', v.key, 'title', v.title)),
                coalesce(v.priority, 2), v.agent_id, p_parent)
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

------------------------------------------------------------------------------
-- tasks.md: the project's task list in its storage, rewritten after a status
-- change. Every status change writes an agent_phase event; the renderer
-- reads the projects with phase events at or past its cursor and moves the
-- cursor to its snapshot's xmin, so a change that commits late is never
-- skipped.
------------------------------------------------------------------------------

CREATE INDEX agent_events_phase_xid_idx ON agent_events (xid) WHERE type = 'agent_phase';

CREATE TABLE tasks_md_cursor (
    id  boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid xid8 NOT NULL DEFAULT '0'
);
INSERT INTO tasks_md_cursor DEFAULT VALUES;

COMMENT ON TABLE tasks_md_cursor IS 'How far the tasks.md renderer has read the agent_phase events: every event below xid is rendered.';

------------------------------------------------------------------------------
-- Row level security (the baseline's rule)
------------------------------------------------------------------------------

ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE task_dependencies ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks_md_cursor ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON agents, task_dependencies, tasks_md_cursor FROM PUBLIC, anon, authenticated, service_role;

GRANT SELECT, INSERT, UPDATE, DELETE ON agents TO authenticated, service_role;
CREATE POLICY agents_service ON agents TO service_role USING (true) WITH CHECK (true);
CREATE POLICY agents_own ON agents TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]))
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

GRANT SELECT, INSERT, DELETE ON task_dependencies TO service_role;
GRANT SELECT ON task_dependencies TO authenticated;
GRANT INSERT (task_id, depends_on_task_id) ON task_dependencies TO authenticated;
CREATE POLICY task_dependencies_service ON task_dependencies TO service_role USING (true) WITH CHECK (true);
CREATE POLICY task_dependencies_read_own ON task_dependencies FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));
CREATE POLICY task_dependencies_insert_own ON task_dependencies FOR INSERT TO authenticated
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

GRANT INSERT (agent_id, priority, parent_task_id) ON ai_tasks TO authenticated;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'ai_tasks_check_refs()', 'agents_guard_delete()', 'agentworker_enqueue_task(uuid)', 'ai_tasks_enqueue()',
        'task_dependencies_check()', 'agentworker_block_dependent(uuid, ai_tasks)', 'ai_tasks_release_dependents()',
        'ai_tasks_hold_for_dependencies()', 'ai_tasks_delete_dependencies()', 'ai_tasks_cancel_children()',
        'agentworker_control_task(uuid, text, integer, text, text)', 'agentworker_expand_plan(uuid, bigint, jsonb)']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;
