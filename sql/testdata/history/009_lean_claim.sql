-- A claim is one round trip: agentworker_claim_task locks the task, moves
-- it to running under a new fence epoch, gives it the claimer's lease,
-- closes a run left running by a dead attempt, opens (or resumes) the run
-- of this attempt, and says whether the task has a checkpoint to continue
-- from, in one call instead of six statements.
--
-- No row: the task does not exist. claimed false: the task is not
-- claimable by this job (not queued, and not running under this very job,
-- as when River retries a job whose worker crashed); nothing changed.
CREATE FUNCTION agentworker_claim_task(p_task uuid, p_job bigint, p_worker text, p_lease interval)
RETURNS TABLE (claimed boolean, checkpointed boolean, task ai_tasks)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v   ai_tasks;
    v_key text;
BEGIN
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
        lease_owner = p_worker, lease_expires_at = now() + p_lease
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
    RETURN QUERY SELECT true, EXISTS (SELECT 1 FROM task_checkpoints c WHERE c.task_id = p_task), v;
END
$$;

-- Internal, as every function of ours (see 008): the owner calls it.
DO $$
BEGIN
    REVOKE ALL ON FUNCTION agentworker_claim_task(uuid, bigint, text, interval) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agentworker_claim_task(uuid, bigint, text, interval) SET search_path = %I, pg_temp', current_schema());
END
$$;
