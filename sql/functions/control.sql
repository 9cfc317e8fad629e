-- Control: every control action on a task (cancel, pause, resume, retry,
-- answer, approve, reject, approve_call, deny_call) through agentworker_control_task, the functions
-- apps call for each, and the broadcast of one action over a project's
-- tasks.

-- agentworker_control_task is every control action: it checks the action
-- against the state machine and the optimistic version, applies it, writes
-- an audit event whatever the outcome, and notifies agentworker_control.
-- It never raises for a refused action, so the audit event commits; the
-- returned object says what happened:
--   {"outcome": "applied" | "rejected" | "conflict" | "invalid" | "not_found",
--    "task_id", "action", "from", "status", "version", "error", "pending"}
-- Pausing a running task sets pause_requested ("pending": true): its loop
-- pauses itself at the next iteration boundary, after a checkpoint; resume
-- before then withdraws the request. Cancel or pause of a task whose change
-- set is being applied is refused with the reason: its files are landing,
-- and a cancel never reports one outcome while another happens. Retry starts
-- the task's retry budget over; resume closes its open budget items.
-- approve_call and deny_call answer one tool call (p_tool_call_id) of a
-- task awaiting approval, deny_call with p_answer as the message the model
-- reads; the answer to the last call that waits queues the task, an
-- earlier one only moves its version ("waiting": the calls still waiting).
DROP FUNCTION IF EXISTS agentworker_control_task(uuid, text, integer, text, text);
CREATE OR REPLACE FUNCTION agentworker_control_task(
    p_task_id uuid, p_action text, p_expected_version integer DEFAULT NULL,
    p_actor text DEFAULT NULL, p_answer text DEFAULT NULL, p_tool_call_id text DEFAULT NULL)
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
    v_call    tool_approvals%ROWTYPE;
    v_waiting integer := 0;
BEGIN
    SELECT * INTO v_task FROM ai_tasks WHERE id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'not_found', 'task_id', p_task_id, 'action', p_action,
            'error', format('task %s not found', p_task_id));
    END IF;

    CASE p_action
        WHEN 'cancel' THEN v_target := 'cancelled'; v_sources := ARRAY['queued', 'running', 'paused', 'awaiting_input', 'waiting', 'review', 'awaiting_approval'];
        WHEN 'pause'  THEN v_target := 'paused';    v_sources := ARRAY['queued', 'running', 'waiting'];
        WHEN 'resume' THEN v_target := 'queued';    v_sources := ARRAY['paused'];
        WHEN 'retry'  THEN v_target := 'queued';    v_sources := ARRAY['failed', 'blocked', 'cancelled'];
        WHEN 'answer' THEN v_target := 'queued';    v_sources := ARRAY['awaiting_input'];
        -- approve: a worker applies the staged change set, fenced, and
        -- the task succeeds. reject: with feedback the build goes on from
        -- its checkpoint; without, it ends and its change set is discarded.
        WHEN 'approve' THEN v_target := 'queued';   v_sources := ARRAY['review'];
        WHEN 'reject' THEN
            v_target := CASE WHEN coalesce(btrim(p_answer), '') = '' THEN 'cancelled' ELSE 'queued' END;
            v_sources := ARRAY['review'];
        WHEN 'approve_call', 'deny_call' THEN v_target := 'queued'; v_sources := ARRAY['awaiting_approval'];
        ELSE v_target := NULL;
    END CASE;
    IF p_action IN ('approve_call', 'deny_call') THEN
        SELECT * INTO v_call FROM tool_approvals WHERE task_id = p_task_id AND tool_call_id = p_tool_call_id;
        SELECT count(*) INTO v_waiting FROM tool_approvals
        WHERE task_id = p_task_id AND status = 'pending' AND tool_call_id IS DISTINCT FROM p_tool_call_id;
    END IF;
    v_withdraw := p_action = 'resume' AND v_task.status = 'running' AND v_task.pause_requested;

    IF v_target IS NULL THEN
        v_outcome := 'invalid';
        v_error := format('unknown action %L: want cancel, pause, resume, retry, answer, approve, reject, approve_call or deny_call', p_action);
    ELSIF p_action IN ('approve_call', 'deny_call') AND coalesce(p_tool_call_id, '') = '' THEN
        v_outcome := 'invalid';
        v_error := 'a tool_call_id is required';
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
    ELSIF p_action IN ('approve_call', 'deny_call') AND v_call.task_id IS NULL THEN
        v_outcome := 'not_found';
        v_error := format('tool call %s of task %s not found', p_tool_call_id, p_task_id);
    ELSIF p_action IN ('approve_call', 'deny_call') AND v_call.status <> 'pending' THEN
        v_outcome := 'rejected';
        v_error := format('tool call %s of task %s is already %s', p_tool_call_id, p_task_id, v_call.status);
    ELSIF p_action = 'reject' AND v_target = 'queued' AND v_task.input ? 'plan_task_id' THEN
        -- Such a build replays its plan's recorded decisions rather than a
        -- conversation, so there is nothing feedback could revise.
        v_outcome := 'rejected';
        v_error := format('cannot revise task %s from feedback: it builds the steps of plan %s; reject it without feedback and start a new build with the feedback in its prompt',
            p_task_id, v_task.input ->> 'plan_task_id');
    ELSIF p_action IN ('cancel', 'pause')
          AND EXISTS (SELECT 1 FROM change_sets WHERE task_id = p_task_id AND status = 'applying') THEN
        v_outcome := 'rejected';
        v_error := format('cannot %s task %s: its finished build is being applied to the project', p_action, p_task_id);
    ELSE
        v_outcome := 'applied';
    END IF;

    PERFORM set_config('agentworker.requeue', 'on', true);
    IF v_outcome = 'applied' AND p_action IN ('approve_call', 'deny_call') THEN
        UPDATE tool_approvals SET status = CASE WHEN p_action = 'approve_call' THEN 'approved' ELSE 'denied' END,
            message = CASE WHEN p_action = 'deny_call' THEN nullif(btrim(p_answer), '') END,
            resolver = v_actor, answered_at = now()
        WHERE task_id = p_task_id AND tool_call_id = p_tool_call_id
        RETURNING * INTO v_call;
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (p_task_id, v_task.project_id, 'tool_approval_answered', jsonb_build_object(
            'toolCallId', v_call.tool_call_id, 'toolName', v_call.tool_name,
            'decision', v_call.status, 'message', v_call.message, 'actor', v_actor, 'waiting', v_waiting));
    END IF;
    IF v_outcome = 'applied' AND p_action IN ('approve_call', 'deny_call') AND v_waiting > 0 THEN
        -- Other calls of the turn still wait: the task stays where it is.
        UPDATE ai_tasks SET version = version + 1, updated_at = now()
        WHERE id = p_task_id
        RETURNING * INTO v_task;
    ELSIF v_outcome = 'applied' AND v_withdraw THEN
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
            WHERE task_id = p_task_id AND kind = 'await_user_input' AND reason IN ('budget', 'budget_exceeded') AND status = 'open';
        END IF;
        IF p_action IN ('approve', 'reject', 'cancel') THEN
            UPDATE inbox_items SET status = 'closed', answer = nullif(btrim(p_answer), ''), resolver = v_actor,
                resolved_at = now(), version = version + 1
            WHERE task_id = p_task_id AND kind = 'review_requested' AND status = 'open';
        END IF;
        IF p_action = 'reject' AND v_target = 'queued' THEN
            -- The feedback is the newest comment: the next attempt gives the
            -- model every comment made since the revision.
            INSERT INTO task_comments (task_id, project_id, author, body)
            VALUES (p_task_id, v_task.project_id, v_actor, p_answer);
        END IF;
        IF p_action = 'approve' THEN
            UPDATE ai_tasks SET approved = true WHERE id = p_task_id;
        END IF;
        IF p_action IN ('approve_call', 'deny_call', 'cancel') THEN
            UPDATE inbox_items SET status = 'closed', resolver = v_actor, resolved_at = now(), version = version + 1
            WHERE task_id = p_task_id AND kind = 'await_user_input' AND reason = 'tool_approval' AND status = 'open';
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
        'status', v_task.status, 'version', v_task.version, 'error', v_error, 'pending', v_pending)
        || CASE WHEN p_action IN ('approve_call', 'deny_call') THEN jsonb_build_object('tool_call_id', p_tool_call_id, 'waiting', v_waiting)
                ELSE '{}' END;

    -- The audit event: who, what, outcome, whatever the outcome.
    INSERT INTO agent_events (task_id, project_id, type, payload)
    VALUES (p_task_id, v_task.project_id, 'log', jsonb_build_object(
        'level', CASE WHEN v_outcome = 'applied' THEN 'info' ELSE 'warn' END,
        'message', CASE WHEN v_outcome = 'applied'
                        THEN CASE WHEN v_pending
                                  THEN format('pause requested by %s: the task pauses at its next iteration boundary', v_actor)
                                  WHEN v_withdraw
                                  THEN format('resume by %s: the pending pause is withdrawn; the task goes on', v_actor)
                                  WHEN p_action IN ('approve_call', 'deny_call') AND v_waiting > 0
                                  THEN format('%s %s by %s: %s more call(s) wait for an answer', p_action, p_tool_call_id, v_actor, v_waiting)
                                  WHEN p_action IN ('approve_call', 'deny_call')
                                  THEN format('%s %s by %s: task is now %s', p_action, p_tool_call_id, v_actor, v_task.status)
                                  ELSE format('%s by %s: task is now %s', p_action, v_actor, v_task.status) END
                        ELSE format('%s by %s refused (%s): %s', p_action, v_actor, v_outcome, v_error) END,
        'metadata', jsonb_build_object('audit', true, 'actor', v_actor, 'action', p_action,
            'outcome', v_outcome, 'status', v_task.status, 'version', v_task.version, 'pending', v_pending,
            'expectedVersion', p_expected_version, 'error', v_error)
            || CASE WHEN p_tool_call_id IS NOT NULL THEN jsonb_build_object('toolCallId', p_tool_call_id) ELSE '{}' END));

    IF v_outcome = 'applied' AND NOT v_pending AND NOT v_withdraw AND v_waiting = 0 THEN
        -- The lifecycle event; cancelled is terminal for followers.
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (p_task_id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', CASE WHEN v_task.status = 'cancelled' THEN 'cancelled' WHEN p_action = 'pause' THEN 'paused' ELSE 'queued' END,
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

-- The control functions apps call, checked against the caller. A task the
-- caller may not see gets the answer a missing task gets, with no audit
-- event either, so the two cannot be told apart.
DROP FUNCTION IF EXISTS agentworker_control_for_caller(uuid, text, integer, text, text);
CREATE OR REPLACE FUNCTION agentworker_control_for_caller(
    p_task_id uuid, p_action text, p_expected_version integer, p_actor text, p_answer text DEFAULT NULL,
    p_tool_call_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ai_tasks WHERE id = p_task_id AND agentworker_caller_may_access(project_id)) THEN
        RETURN jsonb_build_object('outcome', 'not_found', 'task_id', p_task_id, 'action', p_action,
            'error', format('task %s not found', p_task_id));
    END IF;
    RETURN agentworker_control_task(p_task_id, p_action, p_expected_version, p_actor, p_answer, p_tool_call_id);
END
$$;

-- The per-action entry points, for PostgREST (POST /rpc/agentworker_cancel_task).
CREATE OR REPLACE FUNCTION agentworker_cancel_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'cancel', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_pause_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'pause', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_resume_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'resume', expected_version, actor) $$;

-- children: the task's children a cancel left cancelled are retried too,
-- and theirs in turn, as a parent's cancel cancelled them.
DROP FUNCTION IF EXISTS agentworker_retry_task(uuid, integer, text);
CREATE OR REPLACE FUNCTION agentworker_retry_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL,
    children boolean DEFAULT false)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT CASE WHEN children AND EXISTS (SELECT 1 FROM ai_tasks t WHERE t.id = task_id AND agentworker_caller_may_access(t.project_id))
    THEN agentworker_retry_with_children(task_id, expected_version, actor)
    ELSE agentworker_control_for_caller(task_id, 'retry', expected_version, actor) END $$;

-- Retries a task and then, once that applied, each of its children in
-- status cancelled, with theirs; the children's results are listed under
-- "children" of the task's.
CREATE OR REPLACE FUNCTION agentworker_retry_with_children(p_task_id uuid, p_expected_version integer, p_actor text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_res      jsonb;
    v_id       uuid;
    v_children jsonb := '[]';
BEGIN
    v_res := agentworker_control_task(p_task_id, 'retry', p_expected_version, p_actor);
    IF v_res ->> 'outcome' <> 'applied' THEN
        RETURN v_res;
    END IF;
    FOR v_id IN SELECT id FROM ai_tasks WHERE parent_task_id = p_task_id AND status = 'cancelled' ORDER BY created_at, id LOOP
        v_children := v_children || jsonb_build_array(agentworker_retry_with_children(v_id, NULL, p_actor));
    END LOOP;
    RETURN v_res || jsonb_build_object('children', v_children);
END
$$;

CREATE OR REPLACE FUNCTION agentworker_answer_input(task_id uuid, answer text, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'answer', expected_version, actor, answer) $$;

CREATE OR REPLACE FUNCTION agentworker_approve_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'approve', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_reject_task(task_id uuid, feedback text DEFAULT NULL, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'reject', expected_version, actor, feedback) $$;

-- A tool call that waits for approval: approved, it runs when the task
-- goes on; denied, the model reads message as the call's failed result.
CREATE OR REPLACE FUNCTION agentworker_approve_tool_call(task_id uuid, tool_call_id text, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'approve_call', expected_version, actor, NULL, tool_call_id) $$;

CREATE OR REPLACE FUNCTION agentworker_deny_tool_call(task_id uuid, tool_call_id text, message text DEFAULT NULL, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'deny_call', expected_version, actor, message, tool_call_id) $$;

-- agentworker_broadcast applies one control action (pause, resume, cancel or
-- retry) to a project's tasks, each through agentworker_control_task: the
-- same state machine, version check, audit event and fencing as alone. It
-- targets the tasks in p_statuses, or those of p_task_ids (a given id not in
-- the project is answered not_found), or both; with neither, the project's
-- running tasks. A call takes at most p_limit tasks, in id order after
-- p_after, and returns one control result per task: a caller pages on with
-- p_after = the last task_id while a call returned p_limit rows. Each call
-- is its own transaction, so no call holds a lock on more than p_limit
-- tasks. A task whose row another transaction holds (its worker finishing
-- it, say) is not waited for: it is answered conflict, and is unchanged.
CREATE OR REPLACE FUNCTION agentworker_broadcast(
    p_command text, p_project_id uuid, p_statuses text[] DEFAULT NULL, p_task_ids uuid[] DEFAULT NULL,
    p_expected_versions jsonb DEFAULT NULL, p_actor text DEFAULT NULL,
    p_after uuid DEFAULT NULL, p_limit integer DEFAULT 500)
RETURNS SETOF jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id    uuid;
    v_found boolean;
BEGIN
    IF p_command IS NULL OR p_command NOT IN ('pause', 'resume', 'cancel', 'retry') THEN
        RAISE EXCEPTION 'unknown broadcast command %: want pause, resume, cancel or retry', coalesce(p_command, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 5000 THEN
        RAISE EXCEPTION 'broadcast limit % out of range 1..5000', p_limit USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_id, v_found IN
        SELECT t.id, true FROM ai_tasks t
        WHERE t.project_id = p_project_id
          AND (p_task_ids IS NULL OR t.id = ANY (p_task_ids))
          AND (t.status = ANY (p_statuses) OR (p_statuses IS NULL AND p_task_ids IS NOT NULL)
               OR (p_statuses IS NULL AND p_task_ids IS NULL AND t.status = 'running'))
          AND (p_after IS NULL OR t.id > p_after)
        UNION ALL
        SELECT g.id, false FROM unnest(p_task_ids) AS g(id)
        WHERE (p_after IS NULL OR g.id > p_after)
          AND NOT EXISTS (SELECT 1 FROM ai_tasks t WHERE t.id = g.id AND t.project_id = p_project_id)
        ORDER BY 1
        LIMIT p_limit
    LOOP
        IF NOT v_found THEN
            RETURN NEXT jsonb_build_object('outcome', 'not_found', 'task_id', v_id, 'action', p_command,
                'error', format('task %s not found', v_id));
            CONTINUE;
        END IF;
        BEGIN
            PERFORM 1 FROM ai_tasks WHERE id = v_id FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            RETURN NEXT jsonb_build_object('outcome', 'conflict', 'task_id', v_id, 'action', p_command,
                'error', format('task %s is being changed by another transaction: try again', v_id));
            CONTINUE;
        END;
        RETURN NEXT agentworker_control_task(v_id, p_command,
            (p_expected_versions ->> v_id::text)::integer, p_actor);
    END LOOP;
END
$$;

-- The broadcast apps call through PostgREST (POST /rpc/agentworker_broadcast_tasks),
-- checked against the caller: on a project the caller may not see, every
-- given id is answered not_found and nothing else is, as for a project
-- without such tasks.
CREATE OR REPLACE FUNCTION agentworker_broadcast_tasks(
    command text, project_id uuid, statuses text[] DEFAULT NULL, task_ids uuid[] DEFAULT NULL,
    expected_versions jsonb DEFAULT NULL, actor text DEFAULT NULL,
    after uuid DEFAULT NULL, "limit" integer DEFAULT 500)
RETURNS SETOF jsonb
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT agentworker_caller_may_access(project_id) THEN
        RETURN QUERY SELECT jsonb_build_object('outcome', 'not_found', 'task_id', g.id, 'action', command,
                'error', format('task %s not found', g.id))
            FROM unnest(task_ids) AS g(id)
            WHERE after IS NULL OR g.id > after
            ORDER BY g.id
            LIMIT "limit";
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM agentworker_broadcast(command, project_id, statuses, task_ids,
        expected_versions, actor, after, "limit");
END
$$;

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_control_task(uuid, text, integer, text, text, text)',
    'agentworker_control_for_caller(uuid, text, integer, text, text, text)',
    'agentworker_cancel_task(uuid, integer, text)',
    'agentworker_pause_task(uuid, integer, text)',
    'agentworker_resume_task(uuid, integer, text)',
    'agentworker_retry_task(uuid, integer, text, boolean)',
    'agentworker_retry_with_children(uuid, integer, text)',
    'agentworker_answer_input(uuid, text, integer, text)',
    'agentworker_approve_task(uuid, integer, text)',
    'agentworker_reject_task(uuid, text, integer, text)',
    'agentworker_approve_tool_call(uuid, text, integer, text)',
    'agentworker_deny_tool_call(uuid, text, text, integer, text)',
    'agentworker_broadcast(text, uuid, text[], uuid[], jsonb, text, uuid, integer)',
    'agentworker_broadcast_tasks(text, uuid, text[], uuid[], jsonb, text, uuid, integer)']::regprocedure[]);
GRANT EXECUTE ON FUNCTION
    agentworker_cancel_task(uuid, integer, text),
    agentworker_pause_task(uuid, integer, text),
    agentworker_resume_task(uuid, integer, text),
    agentworker_retry_task(uuid, integer, text, boolean),
    agentworker_answer_input(uuid, text, integer, text),
    agentworker_approve_task(uuid, integer, text),
    agentworker_reject_task(uuid, text, integer, text),
    agentworker_approve_tool_call(uuid, text, integer, text),
    agentworker_deny_tool_call(uuid, text, text, integer, text),
    agentworker_broadcast_tasks(text, uuid, text[], uuid[], jsonb, text, uuid, integer)
TO authenticated, service_role;
