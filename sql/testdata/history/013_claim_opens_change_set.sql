-- A build's claim opens its change set: the worker's next statement after
-- every build claim was the change set's open (create it, or read the
-- status of the one an earlier attempt left), one round trip and one commit
-- more on every build's path. With p_open_change_set set, a claimed build
-- task's change set is created in the claim's transaction, under the fence
-- the claim just took, and its status comes back with the claim
-- (change_set_status, change_set_created: the claim made it, so it has no
-- entries and no decisions). Other task types, a claim that claimed nothing,
-- and p_open_change_set false (the default) leave change sets alone and
-- return NULLs, as before.
DROP FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text);
CREATE FUNCTION agentworker_claim_task(p_task uuid, p_job bigint, p_worker text, p_lease interval,
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
    -- task running under this job already is fenced here.
    UPDATE ai_tasks t SET status = 'running', attempt = t.attempt + 1,
        fence = CASE WHEN t.status = 'running' THEN t.fence + 1 ELSE t.fence END,
        river_job_id = p_job, started_at = coalesce(t.started_at, now()), finished_at = NULL,
        updated_at = now(), version = t.version + 1,
        lease_owner = p_worker, lease_expires_at = now() + p_lease,
        last_seq = t.last_seq + v_n
    WHERE t.id = p_task
    RETURNING t.* INTO v;
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

-- Internal, as every function of ours (see 008): the owner calls it.
DO $$
BEGIN
    REVOKE ALL ON FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text, boolean) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text, boolean) SET search_path = %I, pg_temp', current_schema());
END
$$;
