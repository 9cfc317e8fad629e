-- 003 steering: the task and run state machines enforced in the database,
-- the control functions apps call (cancel, pause, resume, retry, answer),
-- leases for crash takeover, the inbox and the daily usage rollup.

-- The task state machine. sql.CanTransition in Go is the same table; a test
-- checks that the two agree for every pair of statuses.
CREATE TABLE agentworker_task_transitions (
    from_status text NOT NULL,
    to_status   text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('queued', 'running'), ('queued', 'cancelled'), ('queued', 'paused'),
    ('running', 'succeeded'), ('running', 'failed'), ('running', 'blocked'),
    ('running', 'cancelled'), ('running', 'paused'), ('running', 'awaiting_input'),
    ('running', 'queued'),
    ('paused', 'queued'), ('paused', 'cancelled'),
    ('awaiting_input', 'queued'), ('awaiting_input', 'cancelled'),
    ('failed', 'queued'), ('blocked', 'queued'), ('cancelled', 'queued');

-- The run state machine; sql.CanTransitionRun mirrors it in Go.
CREATE TABLE agentworker_run_transitions (
    from_status text NOT NULL,
    to_status   text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

INSERT INTO agentworker_run_transitions (from_status, to_status) VALUES
    ('queued', 'running'), ('queued', 'cancelled'),
    ('running', 'succeeded'), ('running', 'failed'), ('running', 'retry_scheduled'),
    ('running', 'cancelled'), ('running', 'interrupted'),
    ('retry_scheduled', 'running'), ('retry_scheduled', 'cancelled'),
    ('interrupted', 'running'), ('interrupted', 'failed'), ('interrupted', 'cancelled');

-- Leases: a running task is held by the worker that renews lease_expires_at;
-- one whose lease lapsed is handed back to the queue (agentworker_take_over_lapsed).
ALTER TABLE ai_tasks
    ADD COLUMN lease_owner      text,
    ADD COLUMN lease_expires_at timestamptz;

CREATE INDEX ai_tasks_lease_idx ON ai_tasks (lease_expires_at) WHERE status = 'running';

-- Every status change of a task, by any writer (the worker, a control
-- function, PostgREST, psql), must be a legal move. A status change bumps
-- version when the writer did not, and a task that stops running loses its
-- lease.
CREATE FUNCTION ai_tasks_guard_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT EXISTS (SELECT 1 FROM agentworker_task_transitions
                       WHERE from_status = OLD.status AND to_status = NEW.status) THEN
            RAISE EXCEPTION 'illegal task status transition: % -> % (task %)', OLD.status, NEW.status, OLD.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_status_transition';
        END IF;
        IF NEW.version = OLD.version THEN
            NEW.version := OLD.version + 1;
        END IF;
        IF NEW.status <> 'running' THEN
            NEW.lease_owner := NULL;
            NEW.lease_expires_at := NULL;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_guard_status BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_guard_status();

CREATE FUNCTION task_runs_guard_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status NOT IN ('queued', 'running') THEN
            RAISE EXCEPTION 'a run starts queued or running, not % (task %)', NEW.status, NEW.task_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'task_runs_status_transition';
        END IF;
    ELSIF NEW.status IS DISTINCT FROM OLD.status
          AND NOT EXISTS (SELECT 1 FROM agentworker_run_transitions
                          WHERE from_status = OLD.status AND to_status = NEW.status) THEN
        RAISE EXCEPTION 'illegal run status transition: % -> % (task %, attempt %)',
            OLD.status, NEW.status, OLD.task_id, OLD.attempt
            USING ERRCODE = 'check_violation', CONSTRAINT = 'task_runs_status_transition';
    END IF;
    IF NEW.status <> 'retry_scheduled' THEN
        NEW.next_retry_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER task_runs_guard_status BEFORE INSERT OR UPDATE OF status ON task_runs
    FOR EACH ROW EXECUTE FUNCTION task_runs_guard_status();

-- Enqueue one River job for a task, as the pickup trigger always did; used
-- by the pickup trigger and by every move back to queued.
CREATE FUNCTION agentworker_enqueue_task(p_task_id uuid) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_job_id bigint;
BEGIN
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
    VALUES (jsonb_build_object('task_id', p_task_id), 'ai_task', 'ai_tasks', 5, 1, 'available')
    RETURNING id INTO v_job_id;
    PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    RETURN v_job_id;
END
$$;

CREATE OR REPLACE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    -- Submit from Go inserts the job itself with River's InsertTx.
    IF NEW.status = 'queued'
       AND coalesce(current_setting('agentworker.skip_enqueue', true), '') <> 'on' THEN
        PERFORM agentworker_enqueue_task(NEW.id);
    END IF;
    RETURN NULL;
END
$$;

-- A task moved back to queued (resume, retry, answer, takeover, or an app's
-- own UPDATE) gets a fresh job, exactly as an inserted one does.
CREATE FUNCTION ai_tasks_requeue() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status = 'queued' AND OLD.status <> 'queued' THEN
        PERFORM agentworker_enqueue_task(NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_requeue AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_requeue();

-- River's job cancellation, as river.Client.JobCancel does it: a job not yet
-- running is cancelled at once; a running one is marked (so River's rescuer
-- never retries it) and its client is told on River's control channel, which
-- cancels the job's context within milliseconds.
CREATE FUNCTION agentworker_cancel_river_job(p_job_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_queue text;
BEGIN
    SELECT queue INTO v_queue FROM river_job
    WHERE id = p_job_id AND state NOT IN ('cancelled', 'completed', 'discarded') AND finalized_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify(current_schema() || '.river_control',
        json_build_object('action', 'cancel', 'job_id', p_job_id, 'queue', v_queue)::text);
    UPDATE river_job SET
        state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
        finalized_at = CASE WHEN state = 'running' THEN finalized_at ELSE now() END,
        metadata = jsonb_set(metadata, '{cancel_attempted_at}', to_jsonb(now()), true)
    WHERE id = p_job_id;
END
$$;

-- inbox_items: what waits for a person — a question the agent asked
-- (await_user_input) or a finished task (task_completed).
CREATE TABLE inbox_items (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  uuid NOT NULL,
    task_id     uuid REFERENCES ai_tasks (id) ON DELETE CASCADE,
    run_id      uuid REFERENCES task_runs (id) ON DELETE SET NULL,
    kind        text NOT NULL CHECK (kind IN ('await_user_input', 'task_completed')),
    -- reason says why an await_user_input item exists: question, budget,
    -- stuck_idle, stuck_repeat, stuck_errors.
    reason      text NOT NULL DEFAULT 'question',
    title       text NOT NULL,
    content     text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    answer      text,
    resolver    text,
    version     integer NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    CHECK (status = 'open' OR resolved_at IS NOT NULL)
);

CREATE INDEX inbox_items_project_idx ON inbox_items (project_id, created_at DESC) WHERE status = 'open';
-- One open item per run and reason: stuck detection and budgets never pile up duplicates.
CREATE UNIQUE INDEX inbox_items_open_per_run_idx ON inbox_items (run_id, kind, reason)
    WHERE status = 'open' AND run_id IS NOT NULL;

-- A task that succeeded leaves a task_completed item, whoever finished it.
CREATE FUNCTION ai_tasks_inbox_completed() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status = 'succeeded' AND OLD.status <> 'succeeded' THEN
        INSERT INTO inbox_items (project_id, task_id, kind, reason, title, content)
        VALUES (NEW.project_id, NEW.id, 'task_completed', 'completed',
                NEW.type || ' task completed',
                coalesce(NEW.result ->> 'summary', ''));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_inbox_completed AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_inbox_completed();

-- usage_daily: tokens and cost by model and day, maintained as each run ends.
CREATE TABLE usage_daily (
    day        date NOT NULL,
    model      text NOT NULL,
    runs       bigint NOT NULL DEFAULT 0,
    tokens_in  bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    cost       numeric(14, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (day, model)
);

CREATE FUNCTION task_runs_usage_rollup() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    -- A run is counted when it stops running; usage added to a run after it
    -- stopped (a cancelled attempt reporting what it spent) is added too.
    IF NEW.status <> 'running' AND (OLD.status = 'running'
       OR NEW.tokens_in <> OLD.tokens_in OR NEW.tokens_out <> OLD.tokens_out OR NEW.cost <> OLD.cost) THEN
        INSERT INTO usage_daily AS u (day, model, runs, tokens_in, tokens_out, cost)
        SELECT (now() AT TIME ZONE 'UTC')::date, coalesce(t.model, 'unknown'),
               CASE WHEN OLD.status = 'running' THEN 1 ELSE 0 END,
               NEW.tokens_in - CASE WHEN OLD.status = 'running' THEN 0 ELSE OLD.tokens_in END,
               NEW.tokens_out - CASE WHEN OLD.status = 'running' THEN 0 ELSE OLD.tokens_out END,
               NEW.cost - CASE WHEN OLD.status = 'running' THEN 0 ELSE OLD.cost END
        FROM ai_tasks t WHERE t.id = NEW.task_id
        ON CONFLICT (day, model) DO UPDATE SET
            runs = u.runs + EXCLUDED.runs,
            tokens_in = u.tokens_in + EXCLUDED.tokens_in,
            tokens_out = u.tokens_out + EXCLUDED.tokens_out,
            cost = u.cost + EXCLUDED.cost;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_runs_usage_rollup AFTER UPDATE OF status, tokens_in, tokens_out, cost ON task_runs
    FOR EACH ROW EXECUTE FUNCTION task_runs_usage_rollup();

-- agentworker_control_task is every control action: it checks the action
-- against the state machine and the optimistic version, applies it, writes
-- an audit event whatever the outcome, and notifies agentworker_control.
-- It never raises for a refused action, so the audit event commits; the
-- returned object says what happened:
--   {"outcome": "applied" | "rejected" | "conflict" | "invalid" | "not_found",
--    "task_id", "action", "from", "status", "version", "error"}
CREATE FUNCTION agentworker_control_task(
    p_task_id uuid, p_action text, p_expected_version integer DEFAULT NULL,
    p_actor text DEFAULT NULL, p_answer text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
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
BEGIN
    SELECT * INTO v_task FROM ai_tasks WHERE id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'not_found', 'task_id', p_task_id, 'action', p_action,
            'error', format('task %s not found', p_task_id));
    END IF;

    CASE p_action
        WHEN 'cancel' THEN v_target := 'cancelled'; v_sources := ARRAY['queued', 'running', 'paused', 'awaiting_input'];
        WHEN 'pause'  THEN v_target := 'paused';    v_sources := ARRAY['queued', 'running'];
        WHEN 'resume' THEN v_target := 'queued';    v_sources := ARRAY['paused'];
        WHEN 'retry'  THEN v_target := 'queued';    v_sources := ARRAY['failed', 'blocked', 'cancelled'];
        WHEN 'answer' THEN v_target := 'queued';    v_sources := ARRAY['awaiting_input'];
        ELSE v_target := NULL;
    END CASE;

    IF v_target IS NULL THEN
        v_outcome := 'invalid';
        v_error := format('unknown action %L: want cancel, pause, resume, retry or answer', p_action);
    ELSIF p_action = 'answer' AND coalesce(btrim(p_answer), '') = '' THEN
        v_outcome := 'invalid';
        v_error := 'an answer is required';
    ELSIF p_expected_version IS NOT NULL AND p_expected_version <> v_task.version THEN
        v_outcome := 'conflict';
        v_error := format('task %s is at version %s, not the expected %s', p_task_id, v_task.version, p_expected_version);
    ELSIF NOT (v_task.status = ANY (v_sources))
          OR NOT EXISTS (SELECT 1 FROM agentworker_task_transitions
                         WHERE from_status = v_task.status AND to_status = v_target) THEN
        v_outcome := 'rejected';
        v_error := format('cannot %s a %s task', p_action, v_task.status);
    ELSE
        v_outcome := 'applied';
    END IF;

    IF v_outcome = 'applied' THEN
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
            UPDATE ai_tasks SET error = NULL, result = NULL WHERE id = p_task_id;
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

    v_result := jsonb_build_object('outcome', v_outcome, 'task_id', p_task_id, 'action', p_action,
        'from', CASE WHEN v_outcome = 'applied' THEN NULL ELSE v_task.status END,
        'status', v_task.status, 'version', v_task.version, 'error', v_error);

    -- The audit event: who, what, outcome, whatever the outcome.
    INSERT INTO agent_events (task_id, project_id, type, payload)
    VALUES (p_task_id, v_task.project_id, 'log', jsonb_build_object(
        'level', CASE WHEN v_outcome = 'applied' THEN 'info' ELSE 'warn' END,
        'message', CASE WHEN v_outcome = 'applied'
                        THEN format('%s by %s: task is now %s', p_action, v_actor, v_task.status)
                        ELSE format('%s by %s refused (%s): %s', p_action, v_actor, v_outcome, v_error) END,
        'metadata', jsonb_build_object('audit', true, 'actor', v_actor, 'action', p_action,
            'outcome', v_outcome, 'status', v_task.status, 'version', v_task.version,
            'expectedVersion', p_expected_version, 'error', v_error)));

    IF v_outcome = 'applied' THEN
        -- The lifecycle event; cancelled is terminal for followers.
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (p_task_id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', CASE p_action WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END,
            'status', v_task.status, 'taskType', v_task.type,
            'summary', format('%s by %s', p_action, v_actor)));
        PERFORM pg_notify('agentworker_control', json_build_object(
            'task_id', p_task_id, 'action', p_action, 'status', v_task.status, 'version', v_task.version)::text);
    END IF;
    RETURN v_result;
END
$$;

-- The per-action entry points, for PostgREST (POST /rpc/agentworker_cancel_task).
CREATE FUNCTION agentworker_cancel_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SET search_path FROM CURRENT
AS $$ SELECT agentworker_control_task(task_id, 'cancel', expected_version, actor) $$;

CREATE FUNCTION agentworker_pause_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SET search_path FROM CURRENT
AS $$ SELECT agentworker_control_task(task_id, 'pause', expected_version, actor) $$;

CREATE FUNCTION agentworker_resume_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SET search_path FROM CURRENT
AS $$ SELECT agentworker_control_task(task_id, 'resume', expected_version, actor) $$;

CREATE FUNCTION agentworker_retry_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SET search_path FROM CURRENT
AS $$ SELECT agentworker_control_task(task_id, 'retry', expected_version, actor) $$;

CREATE FUNCTION agentworker_answer_input(task_id uuid, answer text, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SET search_path FROM CURRENT
AS $$ SELECT agentworker_control_task(task_id, 'answer', expected_version, actor, answer) $$;

-- Takeover: running tasks whose lease lapsed (their worker died or lost the
-- database) go back to the queue; their run is interrupted and their old job
-- cancelled so River's rescuer never runs it again. Any replica may call
-- this; SKIP LOCKED keeps two sweeps from taking the same task.
CREATE FUNCTION agentworker_take_over_lapsed(p_limit integer DEFAULT 100)
RETURNS TABLE (task_id uuid, lease_owner text, lapsed_for interval)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_task ai_tasks%ROWTYPE;
BEGIN
    FOR v_task IN
        SELECT * FROM ai_tasks t
        WHERE t.status = 'running' AND t.lease_expires_at < now()
        ORDER BY t.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE task_runs r SET status = 'interrupted', error_code = 'lease_lapsed',
            error_message = format('lease of %s lapsed', v_task.lease_owner), finished_at = now()
        WHERE r.task_id = v_task.id AND r.status = 'running';
        IF v_task.river_job_id IS NOT NULL THEN
            PERFORM agentworker_cancel_river_job(v_task.river_job_id);
        END IF;
        UPDATE ai_tasks SET status = 'queued', updated_at = now() WHERE id = v_task.id;
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (v_task.id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', 'retrying', 'status', 'queued', 'taskType', v_task.type, 'attempt', v_task.attempt,
            'summary', format('lease of %s lapsed %s ago; handed to another worker',
                              v_task.lease_owner, now() - v_task.lease_expires_at)));
        task_id := v_task.id;
        lease_owner := v_task.lease_owner;
        lapsed_for := now() - v_task.lease_expires_at;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Stuck detection, the part that needs no help from the loop: a running task
-- whose timeline (alerts aside) has not moved for p_idle gets a warning event and one open
-- await_user_input item for its run (the unique index drops duplicates).
CREATE FUNCTION agentworker_flag_idle(p_idle interval)
RETURNS TABLE (task_id uuid, idle_for interval)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v record;
    v_item uuid;
BEGIN
    FOR v IN
        SELECT t.id, t.project_id, r.id AS run_id, now() - coalesce(max(e.created_at) FILTER (WHERE e.payload -> 'metadata' ->> 'alert' IS NULL), t.started_at) AS idle
        FROM ai_tasks t
        JOIN task_runs r ON r.task_id = t.id AND r.attempt = t.attempt AND r.status = 'running'
        LEFT JOIN agent_events e ON e.task_id = t.id
        WHERE t.status = 'running'
        GROUP BY t.id, t.project_id, r.id
        HAVING now() - coalesce(max(e.created_at) FILTER (WHERE e.payload -> 'metadata' ->> 'alert' IS NULL), t.started_at) > p_idle
    LOOP
        INSERT INTO inbox_items (project_id, task_id, run_id, kind, reason, title, content)
        VALUES (v.project_id, v.id, v.run_id, 'await_user_input', 'stuck_idle',
                'Task looks stuck', format('no progress for %s', date_trunc('second', v.idle)))
        ON CONFLICT (run_id, kind, reason) WHERE status = 'open' AND run_id IS NOT NULL DO NOTHING
        RETURNING id INTO v_item;
        IF v_item IS NOT NULL THEN
            INSERT INTO agent_events (task_id, project_id, type, payload)
            VALUES (v.id, v.project_id, 'log', jsonb_build_object(
                'level', 'warn', 'message', format('alert: no progress for %s', date_trunc('second', v.idle)),
                'metadata', jsonb_build_object('alert', 'stuck_idle', 'inboxItemId', v_item, 'runId', v.run_id)));
            task_id := v.id;
            idle_for := v.idle;
            RETURN NEXT;
        END IF;
        v_item := NULL;
    END LOOP;
END
$$;
