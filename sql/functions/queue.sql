-- Pickup and claim: a queued task gets its River job, a claim takes it
-- under a new fence and lease, a lapsed lease is taken over, and an idle
-- running task is flagged.

-- A project's turn in the task queue: the scheduled_at of its next River
-- job at a priority. River takes a queue's available jobs by priority, then
-- scheduled_at, then id, so first come, first served would hold every
-- project's next task behind one project's backlog. Instead a project's
-- next job goes one microsecond after the project's last job still waiting
-- at that priority, and the job of a project with none waiting goes level
-- with the head of the queue (after the head's job, and after earlier
-- newcomers, by id): projects take turns, each first come, first served
-- within itself, and priorities still come first. A turn is in the past,
-- or microseconds ahead of now behind a project's own burst, so the job is
-- 'available' at once, as River's fetch needs. Two transactions enqueuing
-- for one project at once may take the same turn; id orders them.
-- plpgsql: its plan is kept for the session (a SQL function's is made
-- again at every call that is not inlined, which costs more than the probes).
CREATE OR REPLACE FUNCTION agentworker_queue_turn(p_project uuid, p_priority smallint) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(
        (SELECT j.scheduled_at + interval '1 microsecond' FROM river_job j
         WHERE j.state = 'available' AND j.kind = 'ai_task' AND j.args ->> 'project_id' = p_project::text
           AND j.priority = p_priority
         ORDER BY j.scheduled_at DESC LIMIT 1),
        (SELECT j.scheduled_at FROM river_job j
         WHERE j.state = 'available' AND j.queue = 'ai_tasks' AND j.priority = p_priority
         ORDER BY j.scheduled_at LIMIT 1),
        now());
END
$$;

-- The priority of a task is its River job's; its turn is its project's.
CREATE OR REPLACE FUNCTION agentworker_enqueue_task(p_task_id uuid) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job_id bigint;
BEGIN
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, scheduled_at, state)
    SELECT jsonb_build_object('task_id', t.id, 'project_id', t.project_id), 'ai_task', 'ai_tasks', 5, t.priority,
           agentworker_queue_turn(t.project_id, t.priority), 'available'
    FROM ai_tasks t WHERE t.id = p_task_id
    RETURNING id INTO v_job_id;
    PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    RETURN v_job_id;
END
$$;

-- Pickup: queued tasks inserted by anyone (psql, PostgREST, an edge
-- function, Submit from Go) get their River jobs in the same transaction,
-- one insert and one notification per statement, however many rows it
-- inserts. A project's rows take its turns one microsecond apart, in the
-- order the statement inserted them (their ids follow that order too).
CREATE OR REPLACE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- A writer that inserts the job itself (or none) says so.
    IF coalesce(current_setting('agentworker.skip_enqueue', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    WITH queued AS (
        SELECT n.id, n.project_id, n.priority, row_number() OVER () AS ord
        FROM new_rows n WHERE n.status = 'queued'
    ), turns AS MATERIALIZED (  -- one turn a project and priority, not one a row
        SELECT g.project_id, g.priority, agentworker_queue_turn(g.project_id, g.priority) AS at
        FROM (SELECT DISTINCT project_id, priority FROM queued) g
    )
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, scheduled_at, state)
    SELECT jsonb_build_object('task_id', q.id, 'project_id', q.project_id), 'ai_task', 'ai_tasks', 5, q.priority,
           t.at + (row_number() OVER (PARTITION BY q.project_id, q.priority ORDER BY q.ord) - 1) * interval '1 microsecond',
           'available'
    FROM queued q JOIN turns t USING (project_id, priority)
    ORDER BY q.ord;
    IF FOUND THEN
        PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_enqueue AFTER INSERT ON ai_tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_enqueue();

-- A task moved back to queued (resume, retry, answer, takeover, or an app's
-- own UPDATE) gets a fresh job, exactly as an inserted one does, except when
-- the writer keeps the job it has (a worker snoozing a task until its retry).
CREATE OR REPLACE FUNCTION ai_tasks_requeue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status = 'queued' AND OLD.status <> 'queued'
       AND coalesce(current_setting('agentworker.skip_enqueue', true), '') <> 'on' THEN
        PERFORM agentworker_enqueue_task(NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_requeue AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued')
    EXECUTE FUNCTION ai_tasks_requeue();

-- A task's job back in the queue after a wait (the snooze of a retry or of
-- the per-project cap, River's own retry) takes its project's turn again,
-- as a new job does, rather than the place its due time gives it, behind
-- every backlog queued before: never later than that place.
CREATE OR REPLACE FUNCTION river_job_ai_task_turn() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.scheduled_at := least(NEW.scheduled_at, agentworker_queue_turn((NEW.args ->> 'project_id')::uuid, NEW.priority));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER river_job_ai_task_turn BEFORE UPDATE OF state ON river_job
    FOR EACH ROW WHEN (NEW.state = 'available' AND OLD.state <> 'available' AND NEW.kind = 'ai_task' AND NEW.args ? 'project_id')
    EXECUTE FUNCTION river_job_ai_task_turn();

-- River's job cancellation, as river.Client.JobCancel does it: a job not yet
-- running is cancelled at once; a running one is marked (so River's rescuer
-- never retries it) and its client is told on River's control channel, which
-- cancels the job's context within milliseconds.
CREATE OR REPLACE FUNCTION agentworker_cancel_river_job(p_job_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
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

-- A claim is one statement: lock the task, check it is still claimable
-- (queued, or running under this very job, as when River retries a job
-- whose worker crashed), move it to running under a new fence, give it the
-- claimer's lease, close a run left running by a dead attempt, open (or
-- resume) this attempt's run, and say whether a checkpoint waits.
-- No row: the task does not exist. claimed false: nothing changed.
-- p_start_events writes the claim's three events in the same update of the
-- task row (their seqs are taken there):
--   progress    {"kind": "stage_enter", "stage": "claim", "timestamp": …}
--   agent_phase {"phase": "started", "status": "running", "taskType": …, "attempt": n}
--   progress    {"kind": "stage_exit", "stage": "claim", "message": "attempt n on <worker>", "timestamp": …}
-- (the payloads of events.Progress and events.AgentPhase; a test in the
-- worker holds the two in step). 'after_commit': the caller announces them
-- once it committed; 'notify': the announce trigger notifies as for any
-- writer; NULL: no events. p_open_change_set opens a claimed build's change
-- set under the fence the claim just took and returns its status
-- (change_set_created: the claim made it, so it holds nothing yet).
-- Its update of the task row says it is the worker's (agentworker.machine).
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

-- Takeover: running tasks whose lease lapsed (their worker died or lost the
-- database), or that run without one (set running by a writer that is not a
-- worker), go back to the queue; their run is interrupted and their old job
-- cancelled so River's rescuer never runs it again. Any replica may call
-- this; SKIP LOCKED keeps two sweeps from taking the same task.
CREATE OR REPLACE FUNCTION agentworker_take_over_lapsed(p_limit integer DEFAULT 100)
RETURNS TABLE (task_id uuid, lease_owner text, lapsed_for interval)
LANGUAGE plpgsql AS $$
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

-- Stuck detection, the part that needs no help from the loop: a running task
-- whose timeline (alerts aside) has not moved for p_idle gets a warning event
-- and one open await_user_input item for its run (the unique index drops
-- duplicates). Each candidate's row is locked (skipped when a holder is
-- writing to it: a task that writes is not idle) and checked again under
-- the lock, still running the same attempt, before the alert event and the
-- inbox item are written: a task finishing meanwhile has committed its
-- terminal event and left running by then, or waits for the alert.
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

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_queue_turn(uuid, smallint)',
    'agentworker_enqueue_task(uuid)',
    'ai_tasks_enqueue()',
    'ai_tasks_requeue()',
    'river_job_ai_task_turn()',
    'agentworker_cancel_river_job(bigint)',
    'agentworker_claim_task(uuid, bigint, text, interval, text, boolean)',
    'agentworker_take_over_lapsed(integer)',
    'agentworker_flag_idle(interval)']::regprocedure[]);
