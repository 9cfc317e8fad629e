-- 006 fencing: every write a task makes carries its holder's fence and is
-- refused in the same statement when the fence is stale; retries wait in a
-- state nobody mistakes for a live holder; the state machine guards every
-- writer, inserts included.

-- fence is the lease epoch of a task: it grows by one at every claim (and
-- at every move into running, whoever makes it). A holder's writes lock
-- the task row and go through only while fence and status still match
-- (sql.Fence): a worker frozen past its lease, whose task was taken over,
-- cancelled or finished meanwhile, writes nothing more.
ALTER TABLE ai_tasks ADD COLUMN fence bigint NOT NULL DEFAULT 0;

-- retries counts the transient failures of the task since it was created
-- or last retried by a person; the task's own budget, whatever River job
-- carries it.
ALTER TABLE ai_tasks ADD COLUMN retries integer NOT NULL DEFAULT 0;

-- Every status change must be a legal move. A move into running starts a
-- new holder (fence + 1) and needs a lease; a move from running back to
-- queued is a hand-back only the lease sweeper, the worker and the control
-- functions make (they say so with agentworker.requeue): any other writer
-- would leave the holder running while a new job starts a second run.
CREATE OR REPLACE FUNCTION ai_tasks_guard_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status NOT IN ('queued', 'paused') THEN
            RAISE EXCEPTION 'a task starts queued or paused, not % (task %)', NEW.status, NEW.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_status_transition';
        END IF;
        NEW.lease_owner := NULL;
        NEW.lease_expires_at := NULL;
        RETURN NEW;
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT EXISTS (SELECT 1 FROM agentworker_task_transitions
                       WHERE from_status = OLD.status AND to_status = NEW.status) THEN
            RAISE EXCEPTION 'illegal task status transition: % -> % (task %)', OLD.status, NEW.status, OLD.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_status_transition';
        END IF;
        IF OLD.status = 'running' AND NEW.status = 'queued'
           AND coalesce(current_setting('agentworker.requeue', true), '') <> 'on' THEN
            RAISE EXCEPTION 'running -> queued is a hand-back made by the lease sweeper or a control function, not by an update (task %)', OLD.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_status_transition';
        END IF;
        IF NEW.version = OLD.version THEN
            NEW.version := OLD.version + 1;
        END IF;
        IF NEW.status = 'running' THEN
            NEW.fence := OLD.fence + 1;
        ELSE
            NEW.lease_owner := NULL;
            NEW.lease_expires_at := NULL;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_guard_insert BEFORE INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_guard_status();

-- seq is always the database's: a seq the writer supplies is ignored, so
-- the per-task counter and the rows never disagree.
CREATE OR REPLACE FUNCTION agent_events_assign_seq() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
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

-- batch is the idempotency key of a write of events, set on its first row:
-- a write whose commit succeeded but whose reply was lost is sent again
-- with the same key and inserts nothing the second time.
ALTER TABLE agent_events ADD COLUMN batch uuid;
CREATE UNIQUE INDEX agent_events_batch_idx ON agent_events (task_id, batch) WHERE batch IS NOT NULL;

-- prior is what the path held before the set was applied (prior_exists
-- false: nothing; NULL: not recorded), recorded when the set is marked
-- applying, so that an apply stopped by a conflict, even after a crash,
-- puts back what it wrote.
ALTER TABLE change_set_entries
    ADD COLUMN prior        bytea,
    ADD COLUMN prior_exists boolean;

-- A lapsed lease, or a running task with none (set running by a writer
-- that is not a worker), is taken over.
CREATE OR REPLACE FUNCTION agentworker_take_over_lapsed(p_limit integer DEFAULT 100)
RETURNS TABLE (task_id uuid, lease_owner text, lapsed_for interval)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_task ai_tasks%ROWTYPE;
BEGIN
    PERFORM set_config('agentworker.requeue', 'on', true);
    FOR v_task IN
        SELECT * FROM ai_tasks t
        WHERE t.status = 'running' AND (t.lease_expires_at < now() OR t.lease_expires_at IS NULL)
        ORDER BY t.lease_expires_at NULLS FIRST
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE task_runs r SET status = 'interrupted', error_code = 'lease_lapsed',
            error_message = format('lease of %s lapsed', coalesce(v_task.lease_owner, 'nobody')), finished_at = now()
        WHERE r.task_id = v_task.id AND r.status = 'running';
        IF v_task.river_job_id IS NOT NULL THEN
            PERFORM agentworker_cancel_river_job(v_task.river_job_id);
        END IF;
        UPDATE ai_tasks SET status = 'queued', updated_at = now() WHERE id = v_task.id;
        INSERT INTO agent_events (task_id, project_id, type, payload)
        VALUES (v_task.id, v_task.project_id, 'agent_phase', jsonb_build_object(
            'phase', 'retrying', 'status', 'queued', 'taskType', v_task.type, 'attempt', v_task.attempt,
            'summary', CASE WHEN v_task.lease_expires_at IS NULL
                            THEN 'running without a lease; handed to a worker'
                            ELSE format('lease of %s lapsed %s ago; handed to another worker',
                                        v_task.lease_owner, now() - v_task.lease_expires_at) END));
        task_id := v_task.id;
        lease_owner := v_task.lease_owner;
        lapsed_for := coalesce(now() - v_task.lease_expires_at, interval '0');
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('agentworker.requeue', '', true);
END
$$;

-- A task moved back to queued gets a fresh job, except when the writer
-- keeps the job it has (a worker snoozing a task until its retry).
CREATE OR REPLACE FUNCTION ai_tasks_requeue() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status = 'queued' AND OLD.status <> 'queued'
       AND coalesce(current_setting('agentworker.skip_enqueue', true), '') <> 'on' THEN
        PERFORM agentworker_enqueue_task(NEW.id);
    END IF;
    RETURN NULL;
END
$$;

-- agentworker_control_task, as in 005, except:
--   * cancel (and pause) of a task whose change set is being applied is
--     refused with the reason: the build's files are landing, and a cancel
--     must never report one outcome while another happens;
--   * resume of a running task with a pending pause withdraws the pause;
--   * retry starts the task's retry budget over;
--   * its moves back to queued are hand-backs (agentworker.requeue).
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
    v_withdraw boolean := false;
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

-- The change set as the task's last checkpoint saw it: cp says the entry
-- existed then, cp_* what it held. A new attempt resumes the conversation
-- from the checkpoint, so the entries are put back to this view first: a
-- change made after the checkpoint (by tools of an iteration cut short)
-- would otherwise stay, though the conversation that made it is gone.
ALTER TABLE change_set_entries
    ADD COLUMN cp           boolean NOT NULL DEFAULT false,
    ADD COLUMN cp_op        text,
    ADD COLUMN cp_content   bytea,
    ADD COLUMN cp_from_path text;
