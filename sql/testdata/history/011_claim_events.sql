-- A claim and its first events in one statement: the worker's claim was a
-- transaction of four round trips (begin, claim, the claim's three events,
-- commit), all on the path from insert to the handler's start. With
-- p_start_events set, agentworker_claim_task writes those events itself,
-- taking their seqs in the same update of the task row that claims it:
--   progress    {"kind": "stage_enter", "stage": "claim", "timestamp": …}
--   agent_phase {"phase": "started", "status": "running", "taskType": …, "attempt": n}
--   progress    {"kind": "stage_exit", "stage": "claim", "message": "attempt n on <worker>", "timestamp": …}
-- (the payloads of events.Progress and events.AgentPhase; a test in the
-- worker holds the two in step). p_start_events 'after_commit': the events
-- are not notified in the transaction, the caller announces them once it
-- committed; 'notify': the announce trigger notifies as for any writer.
-- NULL (the default) writes no events, as before.
DROP FUNCTION agentworker_claim_task(uuid, bigint, text, interval);
CREATE FUNCTION agentworker_claim_task(p_task uuid, p_job bigint, p_worker text, p_lease interval,
                                       p_start_events text DEFAULT NULL)
RETURNS TABLE (claimed boolean, checkpointed boolean, task ai_tasks)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v     ai_tasks;
    v_key text;
    v_n   integer := CASE WHEN p_start_events IS NULL THEN 0 ELSE 3 END;
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
        RETURN QUERY SELECT false, false, v;
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
    RETURN QUERY SELECT true, EXISTS (SELECT 1 FROM task_checkpoints c WHERE c.task_id = p_task), v;
END
$$;

-- Internal, as every function of ours (see 008): the owner calls it.
DO $$
BEGIN
    REVOKE ALL ON FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agentworker_claim_task(uuid, bigint, text, interval, text) SET search_path = %I, pg_temp', current_schema());
END
$$;
