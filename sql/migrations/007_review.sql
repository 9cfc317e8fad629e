-- Review before apply: a build whose input says review = true ends, once
-- its checks passed, in review: its change set stays staged (open), its
-- checkpoint is kept, its run is finished and it holds no lease. A person
-- approves it (a worker applies the set, fenced, exactly as a build that
-- succeeds does; a file changed since the build read it sends the task
-- back to review with the conflict), or rejects it: with feedback the
-- task is queued and continues from its checkpoint with the feedback and
-- the comments since its revision as the next user message; without, it
-- is cancelled and its change set discarded. A task in review has not
-- succeeded: its dependents keep waiting.

ALTER TABLE ai_tasks DROP CONSTRAINT ai_tasks_status_check;
ALTER TABLE ai_tasks ADD CONSTRAINT ai_tasks_status_check CHECK (status IN (
    'queued', 'running', 'succeeded', 'failed', 'blocked',
    'cancelled', 'paused', 'awaiting_input', 'waiting', 'review'));

INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('running', 'review'),    -- a build to review finished cleanly
    ('review', 'succeeded'),
    ('review', 'queued'),     -- approved (to apply) or rejected with feedback
    ('review', 'cancelled');  -- rejected without feedback, or cancelled

-- approved: the next attempt only applies the staged change set.
ALTER TABLE ai_tasks ADD COLUMN approved boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN ai_tasks.approved IS 'A task in review was approved: its next attempt applies its change set and nothing else.';

-- An approval is for the one apply that follows it: a task that stops
-- otherwise (fails, is cancelled, pauses, enters review again) drops it, so
-- a later retry builds again. A task entering review tells a person.
CREATE FUNCTION ai_tasks_enter_review() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    NEW.approved := false;
    IF NEW.status = 'review' THEN
        INSERT INTO inbox_items (project_id, task_id, kind, reason, title, content)
        VALUES (NEW.project_id, NEW.id, 'review_requested', 'review',
                NEW.type || ' task waits for review',
                coalesce(NEW.error ->> 'message', NEW.result ->> 'summary', ''));
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_enter_review BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('queued', 'running'))
    EXECUTE FUNCTION ai_tasks_enter_review();

ALTER TABLE inbox_items DROP CONSTRAINT inbox_items_kind_check;
ALTER TABLE inbox_items ADD CONSTRAINT inbox_items_kind_check
    CHECK (kind IN ('await_user_input', 'task_completed', 'review_requested'));
COMMENT ON COLUMN inbox_items.kind IS 'await_user_input | task_completed | review_requested.';

-- task_comments: what people said about a task's change set, the feedback
-- of a reject among them; path and line name a place in its diff.
CREATE TABLE task_comments (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id    uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    project_id uuid NOT NULL,
    author     text NOT NULL,
    body       text NOT NULL CHECK (btrim(body) <> ''),
    path       text,
    line       integer CHECK (line > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (line IS NULL OR path IS NOT NULL)
);

CREATE INDEX task_comments_task_idx ON task_comments (task_id, created_at);

COMMENT ON TABLE task_comments IS 'Comments on a task''s change set; those since its last revision go to the model with a reject''s feedback.';

ALTER TABLE task_comments ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON task_comments FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, INSERT ON task_comments TO service_role;
GRANT SELECT ON task_comments TO authenticated;
CREATE POLICY task_comments_service ON task_comments TO service_role USING (true) WITH CHECK (true);
CREATE POLICY task_comments_read_own ON task_comments FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

------------------------------------------------------------------------------
-- Control: approve and reject a task in review; a task in review may be
-- cancelled.
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
        WHEN 'cancel' THEN v_target := 'cancelled'; v_sources := ARRAY['queued', 'running', 'paused', 'awaiting_input', 'waiting', 'review'];
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
        ELSE v_target := NULL;
    END CASE;
    v_withdraw := p_action = 'resume' AND v_task.status = 'running' AND v_task.pause_requested;

    IF v_target IS NULL THEN
        v_outcome := 'invalid';
        v_error := format('unknown action %L: want cancel, pause, resume, retry, answer, approve or reject', p_action);
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

CREATE FUNCTION agentworker_approve_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'approve', expected_version, actor) $$;

CREATE FUNCTION agentworker_reject_task(task_id uuid, feedback text DEFAULT NULL, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'reject', expected_version, actor, feedback) $$;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'ai_tasks_enter_review()', 'agentworker_control_task(uuid, text, integer, text, text)',
        'agentworker_approve_task(uuid, integer, text)', 'agentworker_reject_task(uuid, text, integer, text)']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;

GRANT EXECUTE ON FUNCTION
    agentworker_approve_task(uuid, integer, text),
    agentworker_reject_task(uuid, text, integer, text)
TO authenticated, service_role;
