-- 005 checkpoints: a task's loop is saved after every iteration, so a new
-- attempt (River retry, takeover after a crash, resume after a pause or an
-- answer) continues where the last one stopped instead of starting over;
-- pause of a running task is a request the loop honours at its next
-- iteration boundary.

-- task_checkpoints: the conversation and the loop state of a task after its
-- last finished iteration. Written by the loop in the transaction of that
-- iteration's events and usage; dropped when the task ends.
CREATE TABLE task_checkpoints (
    task_id    uuid PRIMARY KEY REFERENCES ai_tasks (id) ON DELETE CASCADE,
    -- attempt is the task attempt that wrote it.
    attempt    integer NOT NULL,
    iteration  integer NOT NULL,
    -- messages is the conversation ([]llm.Message), state the loop's
    -- counters (usage, cost, repair state, touched files, a pending question).
    messages   jsonb NOT NULL,
    state      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- pause_requested: set by agentworker_pause_task on a running task; its
-- loop checkpoints and pauses at the top of its next iteration. It survives
-- a hand-back to the queue (takeover, shutdown) and is cleared when the
-- task reaches any other status.
ALTER TABLE ai_tasks ADD COLUMN pause_requested boolean NOT NULL DEFAULT false;

CREATE FUNCTION ai_tasks_clear_pause() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('running', 'queued') THEN
        NEW.pause_requested := false;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_clear_pause BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_clear_pause();

-- A task that ended (succeeded, failed, blocked, cancelled) has nothing to
-- continue: its checkpoint goes, and a change set still open (a paused task
-- cancelled, say) is discarded. A retry starts over.
CREATE FUNCTION ai_tasks_drop_checkpoint() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status THEN
        DELETE FROM task_checkpoints WHERE task_id = NEW.id;
        UPDATE change_sets SET status = 'discarded', updated_at = now() WHERE task_id = NEW.id AND status = 'open';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_drop_checkpoint AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_drop_checkpoint();

-- agentworker_control_task, as in 003, except: pausing a running task sets
-- pause_requested (the result says "pending": true) instead of cancelling
-- its job, and resuming closes the task's open budget inbox items.
CREATE OR REPLACE FUNCTION agentworker_control_task(
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
    v_pending boolean := false;
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

    IF v_outcome = 'applied' AND p_action = 'pause' AND v_task.status = 'running' THEN
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
            UPDATE ai_tasks SET error = NULL, result = NULL WHERE id = p_task_id;
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
                                  ELSE format('%s by %s: task is now %s', p_action, v_actor, v_task.status) END
                        ELSE format('%s by %s refused (%s): %s', p_action, v_actor, v_outcome, v_error) END,
        'metadata', jsonb_build_object('audit', true, 'actor', v_actor, 'action', p_action,
            'outcome', v_outcome, 'status', v_task.status, 'version', v_task.version, 'pending', v_pending,
            'expectedVersion', p_expected_version, 'error', v_error)));

    IF v_outcome = 'applied' AND NOT v_pending THEN
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
