-- 102 exactly once: the idle check holds the task row like every other
-- writer of a task's events, so nothing follows the terminal event; the
-- machine's columns of ai_tasks are refused from any writer but the worker.

-- agentworker_flag_idle, as in 003, except: each candidate task's row is
-- locked (skipped when a holder is writing to it: a task that writes is not
-- idle) and checked again under the lock, still running the same attempt,
-- before the alert event and the inbox item are written. A task finishing
-- meanwhile has committed its terminal event and left running by then, or
-- waits for the alert to commit first.
CREATE OR REPLACE FUNCTION agentworker_flag_idle(p_idle interval)
RETURNS TABLE (task_id uuid, idle_for interval)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v record;
    v_item uuid;
BEGIN
    FOR v IN
        SELECT t.id, t.project_id, t.attempt, r.id AS run_id, now() - coalesce(max(e.created_at) FILTER (WHERE e.payload -> 'metadata' ->> 'alert' IS NULL), t.started_at) AS idle
        FROM ai_tasks t
        JOIN task_runs r ON r.task_id = t.id AND r.attempt = t.attempt AND r.status = 'running'
        LEFT JOIN agent_events e ON e.task_id = t.id
        WHERE t.status = 'running'
        GROUP BY t.id, t.project_id, t.attempt, r.id
        HAVING now() - coalesce(max(e.created_at) FILTER (WHERE e.payload -> 'metadata' ->> 'alert' IS NULL), t.started_at) > p_idle
    LOOP
        PERFORM 1 FROM ai_tasks t
        WHERE t.id = v.id AND t.status = 'running' AND t.attempt = v.attempt
        FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
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

-- The machine's columns of ai_tasks are the worker's: the attempt and
-- retry counters (attempt, retries), the event seq counter (last_seq), the
-- lease and its holder (fence, lease_owner, lease_expires_at) and the job
-- of the current run (river_job_id). An insert starts them at their
-- defaults; an update changes them only when the worker's statement says
-- it is the worker's (agentworker.machine, set by the claim and the lease
-- renewal), or is one of ours that moves one of them: an event write
-- taking its seqs (agentworker.seq), a trigger of ours (the event seq
-- trigger), a hand-back or a person's retry (agentworker.requeue moves
-- retries). Any other writer is refused: an INSERT with retries = -1000
-- would get a 1,005-try budget, last_seq = 41 would start the events at
-- 42, and a lease set by hand ten years ahead would never be swept; a
-- lease is only ever now() + TASK_LEASE, set by the worker.
CREATE FUNCTION ai_tasks_guard_columns() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_machine boolean := coalesce(current_setting('agentworker.machine', true), '') = 'on';
    v_requeue boolean := coalesce(current_setting('agentworker.requeue', true), '') = 'on';
    v_column  text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_column := CASE
            WHEN NEW.attempt <> 0 THEN 'attempt'
            WHEN NEW.retries <> 0 THEN 'retries'
            WHEN NEW.last_seq <> 0 THEN 'last_seq'
            WHEN NEW.fence <> 0 THEN 'fence'
            WHEN NEW.river_job_id IS NOT NULL THEN 'river_job_id'
            WHEN NEW.lease_owner IS NOT NULL THEN 'lease_owner'
            WHEN NEW.lease_expires_at IS NOT NULL THEN 'lease_expires_at'
        END;
        IF v_column IS NOT NULL THEN
            RAISE EXCEPTION 'ai_tasks.% is the worker''s: a task is inserted without it (task %)', v_column, NEW.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
        END IF;
        RETURN NEW;
    END IF;
    IF v_machine THEN
        RETURN NEW;
    END IF;
    v_column := CASE
        WHEN NEW.attempt IS DISTINCT FROM OLD.attempt THEN 'attempt'
        WHEN NEW.retries IS DISTINCT FROM OLD.retries AND NOT v_requeue THEN 'retries'
        WHEN NEW.last_seq IS DISTINCT FROM OLD.last_seq
             AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement' AND pg_trigger_depth() < 2 THEN 'last_seq'
        WHEN NEW.fence IS DISTINCT FROM OLD.fence THEN 'fence'
        WHEN NEW.river_job_id IS DISTINCT FROM OLD.river_job_id THEN 'river_job_id'
        WHEN NEW.lease_owner IS DISTINCT FROM OLD.lease_owner THEN 'lease_owner'
        WHEN NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN 'lease_expires_at'
    END;
    IF v_column IS NOT NULL THEN
        RAISE EXCEPTION 'ai_tasks.% is the worker''s: only the worker changes it (task %)', v_column, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
    END IF;
    RETURN NEW;
END
$$;

-- Named to fire before ai_tasks_guard_insert and ai_tasks_guard_status
-- (triggers fire in name order), which set the lease and fence columns of
-- a status move themselves. The WHEN clauses keep the function from being
-- called by the writes that may make the change (a claim, a renewal, an
-- event batch, the seq trigger): it runs only where a refusal is possible.
CREATE TRIGGER ai_tasks_guard_columns_insert BEFORE INSERT ON ai_tasks
    FOR EACH ROW WHEN (NEW.attempt <> 0 OR NEW.retries <> 0 OR NEW.last_seq <> 0 OR NEW.fence <> 0
        OR NEW.river_job_id IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_expires_at IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_guard_columns();
CREATE TRIGGER ai_tasks_guard_columns BEFORE UPDATE ON ai_tasks
    FOR EACH ROW WHEN (coalesce(current_setting('agentworker.machine', true), '') <> 'on'
        AND ((NEW.attempt, NEW.retries, NEW.fence, NEW.river_job_id, NEW.lease_owner, NEW.lease_expires_at)
                IS DISTINCT FROM (OLD.attempt, OLD.retries, OLD.fence, OLD.river_job_id, OLD.lease_owner, OLD.lease_expires_at)
            OR (NEW.last_seq IS DISTINCT FROM OLD.last_seq AND pg_trigger_depth() = 0
                AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement')))
    EXECUTE FUNCTION ai_tasks_guard_columns();

-- agentworker_claim_task, as in 013, except that it says its update of the
-- task row is the worker's (agentworker.machine).
CREATE OR REPLACE FUNCTION agentworker_claim_task(p_task uuid, p_job bigint, p_worker text, p_lease interval,
                                       p_start_events text DEFAULT NULL, p_open_change_set boolean DEFAULT false)
RETURNS TABLE (claimed boolean, checkpointed boolean, change_set_status text, change_set_created boolean, task ai_tasks)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v          ai_tasks;
    v_key      text;
    v_n        integer := CASE WHEN p_start_events IS NULL THEN 0 ELSE 3 END;
    v_cs       text;
    v_cs_new   boolean;
BEGIN
    IF p_start_events IS NOT NULL AND p_start_events NOT IN ('after_commit', 'notify') THEN
        RAISE EXCEPTION 'agentworker_claim_task: p_start_events must be after_commit, notify or NULL, not %', p_start_events
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO v FROM ai_tasks t WHERE t.id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT (v.status = 'queued' OR (v.status = 'running' AND v.river_job_id = p_job)) THEN
        RETURN QUERY SELECT false, false, NULL::text, NULL::boolean, v;
        RETURN;
    END IF;
    -- The guard trigger moves the fence of a task that starts running; a
    -- task running under this job already is fenced here. The claim is the
    -- worker's: it may set the machine's columns (ai_tasks_guard_columns).
    PERFORM set_config('agentworker.machine', 'on', true);
    UPDATE ai_tasks t SET status = 'running', attempt = t.attempt + 1,
        fence = CASE WHEN t.status = 'running' THEN t.fence + 1 ELSE t.fence END,
        river_job_id = p_job, started_at = coalesce(t.started_at, now()), finished_at = NULL,
        updated_at = now(), version = t.version + 1,
        lease_owner = p_worker, lease_expires_at = now() + p_lease,
        last_seq = t.last_seq + v_n
    WHERE t.id = p_task
    RETURNING t.* INTO v;
    PERFORM set_config('agentworker.machine', '', true);
    UPDATE task_runs r SET status = 'interrupted', finished_at = now()
    WHERE r.task_id = p_task AND r.status = 'running';
    -- A run waiting for its retry goes on as this attempt (retry_scheduled
    -- -> running); otherwise the attempt opens a run of its own.
    v_key := p_task::text || '/' || v.attempt;
    UPDATE task_runs r SET status = 'running', attempt = v.attempt, idempotency_key = v_key,
        river_job_id = p_job, worker_id = p_worker, started_at = now(), finished_at = NULL
    WHERE r.task_id = p_task AND r.status = 'retry_scheduled';
    IF NOT FOUND THEN
        INSERT INTO task_runs (task_id, attempt, idempotency_key, river_job_id, worker_id, status, started_at)
        VALUES (p_task, v.attempt, v_key, p_job, p_worker, 'running', now());
    END IF;
    IF v_n > 0 THEN
        -- The seqs were taken above (the statement mark keeps the row
        -- trigger from taking them again); the announce trigger consumes
        -- both marks.
        PERFORM set_config('agentworker.seq', 'statement', true);
        IF p_start_events = 'after_commit' THEN
            PERFORM set_config('agentworker.announce', 'after_commit', true);
        END IF;
        INSERT INTO agent_events (task_id, project_id, seq, type, payload) VALUES
            (p_task, v.project_id, v.last_seq - 2, 'progress', jsonb_build_object(
                'kind', 'stage_enter', 'stage', 'claim',
                'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))),
            (p_task, v.project_id, v.last_seq - 1, 'agent_phase', jsonb_build_object(
                'phase', 'started', 'status', 'running', 'taskType', v.type, 'attempt', v.attempt)),
            (p_task, v.project_id, v.last_seq, 'progress', jsonb_build_object(
                'kind', 'stage_exit', 'stage', 'claim', 'message', format('attempt %s on %s', v.attempt, p_worker),
                'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')));
    END IF;
    IF p_open_change_set AND v.type = 'build' THEN
        -- A retried attempt finds the set its predecessor left, whatever
        -- its status (applying: the handler finishes that apply).
        INSERT INTO change_sets (task_id, project_id) VALUES (p_task, v.project_id)
        ON CONFLICT (task_id) DO NOTHING
        RETURNING status INTO v_cs;
        v_cs_new := FOUND;
        IF NOT v_cs_new THEN
            SELECT s.status INTO v_cs FROM change_sets s WHERE s.task_id = p_task;
        END IF;
    END IF;
    RETURN QUERY SELECT true, EXISTS (SELECT 1 FROM task_checkpoints c WHERE c.task_id = p_task), v_cs, v_cs_new, v;
END
$$;


-- Column privileges: service_role inserts and updates every column of
-- ai_tasks but the machine's (the trigger above refuses them from any
-- writer; the privileges refuse them before a row is touched).
DO $$
DECLARE
    v_cols text;
    v_schema text := current_schema();
BEGIN
    SELECT string_agg(format('%I', c.column_name), ', ' ORDER BY c.ordinal_position) INTO v_cols
    FROM information_schema.columns c
    WHERE c.table_schema = v_schema AND c.table_name = 'ai_tasks' AND c.is_generated = 'NEVER'
      AND c.column_name NOT IN ('attempt', 'retries', 'last_seq', 'fence', 'river_job_id', 'lease_owner', 'lease_expires_at');
    EXECUTE 'REVOKE INSERT, UPDATE ON ai_tasks FROM service_role';
    EXECUTE format('GRANT INSERT (%s), UPDATE (%s) ON ai_tasks TO service_role', v_cols, v_cols);

    -- Internal, as every function of ours (see 008).
    REVOKE ALL ON FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text, boolean) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text, boolean) SET search_path = %I, pg_temp', v_schema);
    REVOKE ALL ON FUNCTION ai_tasks_guard_columns() FROM PUBLIC, anon, authenticated, service_role;
    ALTER FUNCTION ai_tasks_guard_columns() SECURITY DEFINER;
    EXECUTE format('ALTER FUNCTION ai_tasks_guard_columns() SET search_path = %I, pg_temp', v_schema);
    EXECUTE format('ALTER FUNCTION agentworker_flag_idle(interval) SET search_path = %I, pg_temp', v_schema);
END
$$;
