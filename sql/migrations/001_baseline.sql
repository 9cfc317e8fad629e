-- The baseline: agentworker's schema as one file, each object defined once,
-- grouped by concern. Later migrations only add to it (002_…, 003_…); this
-- file never changes again. sql/schema.sql shows the schema as it is after
-- every migration, generated from a migrated database.
--
--   1. Tables
--   2. State machines and guards
--   3. Pickup and claim
--   4. Events and announcements
--   5. Change sets and checkpoints
--   6. Control functions
--   7. Usage
--   8. Row level security
--
-- Two settings of a transaction steer the triggers, and only the worker and
-- our own functions set them: agentworker.skip_enqueue ('on': the writer
-- inserts the River job itself) and agentworker.requeue ('on': a move from
-- running back to queued is a hand-back). agentworker.seq and
-- agentworker.announce mark a single statement of events (section 4).

------------------------------------------------------------------------------
-- 1. Tables
------------------------------------------------------------------------------

-- ai_tasks: the work queue apps write to, one row per task. The pickup
-- trigger gives each queued row a River job.
CREATE TABLE ai_tasks (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id       uuid NOT NULL,
    type             text NOT NULL CHECK (type IN ('chat', 'plan', 'build')),
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN (
                         'queued', 'running', 'succeeded', 'failed', 'blocked',
                         'cancelled', 'paused', 'awaiting_input')),
    prompt           text,
    input            jsonb NOT NULL DEFAULT '{}',
    result           jsonb,
    error            jsonb,
    model            text,
    attempt          integer NOT NULL DEFAULT 0,
    tokens_in        bigint NOT NULL DEFAULT 0,
    tokens_out       bigint NOT NULL DEFAULT 0,
    tokens           bigint GENERATED ALWAYS AS (tokens_in + tokens_out) STORED,
    cost             numeric(14, 6) NOT NULL DEFAULT 0,
    last_seq         integer NOT NULL DEFAULT 0,
    river_job_id     bigint,
    version          integer NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    pause_requested  boolean NOT NULL DEFAULT false,
    fence            bigint NOT NULL DEFAULT 0,
    retries          integer NOT NULL DEFAULT 0
);

CREATE INDEX ai_tasks_project_id_idx ON ai_tasks (project_id, created_at DESC);
CREATE INDEX ai_tasks_queued_idx ON ai_tasks (created_at) WHERE status = 'queued';
CREATE INDEX ai_tasks_lease_idx ON ai_tasks (lease_expires_at) WHERE status = 'running';

COMMENT ON TABLE ai_tasks IS 'The work queue apps write to: one row per task; an inserted queued row gets a River job in the same transaction.';
COMMENT ON COLUMN ai_tasks.type IS 'chat | plan | build: chat and plan get read-only tools, build the full set.';
COMMENT ON COLUMN ai_tasks.status IS 'The task state machine (agentworker_task_transitions), enforced for every writer.';
COMMENT ON COLUMN ai_tasks.input IS 'Task options: files, budget, expectations, …';
COMMENT ON COLUMN ai_tasks.result IS 'What a finished task produced (summary, files, …).';
COMMENT ON COLUMN ai_tasks.error IS 'A failed or blocked task''s typed error: {"code", "message", "recoverable", "attempt"}.';
COMMENT ON COLUMN ai_tasks.model IS 'Model to use; the worker''s LLM_MODEL when NULL.';
COMMENT ON COLUMN ai_tasks.attempt IS 'Claims so far; the current run is task_runs (task_id, attempt).';
COMMENT ON COLUMN ai_tasks.tokens IS 'tokens_in + tokens_out.';
COMMENT ON COLUMN ai_tasks.last_seq IS 'The per-task event counter: agent_events.seq is taken from it under the task row''s lock.';
COMMENT ON COLUMN ai_tasks.river_job_id IS 'The River job that holds the current claim.';
COMMENT ON COLUMN ai_tasks.version IS 'Optimistic version: bumped by every status change and control action.';
COMMENT ON COLUMN ai_tasks.lease_owner IS 'The worker holding a running task; NULL when not running.';
COMMENT ON COLUMN ai_tasks.lease_expires_at IS 'When the holder''s lease lapses and the task is taken over; NULL when not running.';
COMMENT ON COLUMN ai_tasks.pause_requested IS 'A pause the running loop honours at its next iteration boundary; cleared when the task reaches any status but running or queued.';
COMMENT ON COLUMN ai_tasks.fence IS 'The lease epoch: one more at every move into running. A holder''s writes go through only while fence and status still match.';
COMMENT ON COLUMN ai_tasks.retries IS 'Transient failures since the task was created or last retried by a person: the task''s own budget, whatever River job carries it.';

-- task_runs: one row per attempt at a task.
CREATE TABLE task_runs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id         uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    attempt         integer NOT NULL CHECK (attempt >= 1),
    idempotency_key text NOT NULL UNIQUE,
    river_job_id    bigint,
    worker_id       text,
    status          text NOT NULL DEFAULT 'running' CHECK (status IN (
                        'queued', 'running', 'retry_scheduled', 'interrupted',
                        'succeeded', 'failed', 'cancelled')),
    tokens_in       bigint NOT NULL DEFAULT 0,
    tokens_out      bigint NOT NULL DEFAULT 0,
    cost            numeric(14, 6) NOT NULL DEFAULT 0,
    error_code      text,
    error_message   text,
    next_retry_at   timestamptz CHECK (next_retry_at IS NULL OR status = 'retry_scheduled'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    UNIQUE (task_id, attempt)
);

CREATE INDEX task_runs_finished_at_idx ON task_runs (finished_at);

COMMENT ON TABLE task_runs IS 'One row per attempt at a task, with what it spent and how it ended.';
COMMENT ON COLUMN task_runs.idempotency_key IS '<task id>/<attempt>.';
COMMENT ON COLUMN task_runs.status IS 'The run state machine (agentworker_run_transitions).';
COMMENT ON COLUMN task_runs.next_retry_at IS 'When a retry_scheduled run goes on; NULL in every other status.';

-- agent_events: the typed, ordered timeline of each task. task_id names a
-- task without a foreign key: every insert naming a task updates that
-- task's row in the same statement, under its row lock, or fails
-- (section 4), which proves what the key's per-row check proved.
CREATE TABLE agent_events (
    id          bigserial PRIMARY KEY,
    task_id     uuid,
    project_id  uuid NOT NULL,
    seq         integer,
    type        text NOT NULL CHECK (type IN (
                    'agent_phase', 'tool_call', 'file_update', 'self_repair',
                    'log', 'error', 'progress')),
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    batch       uuid,
    UNIQUE (task_id, seq),
    CHECK (task_id IS NULL OR seq IS NOT NULL)
);

-- A bigserial id can become visible out of order across transactions, so a
-- project-wide reader orders by (xid, id) and reads only events whose xid
-- is below its snapshot's xmin: nothing can later appear before its cursor.
CREATE INDEX agent_events_project_xid_idx ON agent_events (project_id, xid, id);
CREATE UNIQUE INDEX agent_events_batch_idx ON agent_events (task_id, batch) WHERE batch IS NOT NULL;

COMMENT ON TABLE agent_events IS 'The typed, ordered timeline of each task (and project-level events with no task).';
COMMENT ON COLUMN agent_events.task_id IS 'The task, without a foreign key: an insert for a missing task fails with SQLSTATE 23503, deleting a task deletes its events.';
COMMENT ON COLUMN agent_events.seq IS 'Per task, from 1, in commit order for the task whoever writes; always the database''s.';
COMMENT ON COLUMN agent_events.type IS 'agent_phase | tool_call | file_update | self_repair | log | error | progress.';
COMMENT ON COLUMN agent_events.xid IS 'The writing transaction: a project cursor is (xid, id), read below the snapshot''s xmin.';
COMMENT ON COLUMN agent_events.batch IS 'Idempotency key of one write of events, on its first row: a write resent after a lost reply inserts nothing.';

-- inbox_items: what waits for a person.
CREATE TABLE inbox_items (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  uuid NOT NULL,
    task_id     uuid REFERENCES ai_tasks (id) ON DELETE CASCADE,
    run_id      uuid REFERENCES task_runs (id) ON DELETE SET NULL,
    kind        text NOT NULL CHECK (kind IN ('await_user_input', 'task_completed')),
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

COMMENT ON TABLE inbox_items IS 'What waits for a person: a question the agent asked, a budget or stuck alert, a finished task.';
COMMENT ON COLUMN inbox_items.kind IS 'await_user_input | task_completed.';
COMMENT ON COLUMN inbox_items.reason IS 'Why an await_user_input item exists: question, budget, stuck_idle, stuck_repeat, stuck_errors (completed for task_completed).';

-- change_sets: one per build task. A build's writes are staged here and
-- reach the project's files only when the build succeeds.
--   open      the agent is still working; entries may change
--   applying  the build succeeded; entries are being written to storage.
--             A crash here is finished by the next attempt (idempotent).
--   applied   every entry is in storage; the task is succeeded
--   discarded the build failed, was blocked or cancelled
CREATE TABLE change_sets (
    task_id    uuid PRIMARY KEY REFERENCES ai_tasks (id) ON DELETE CASCADE,
    project_id uuid NOT NULL,
    status     text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'applying', 'applied', 'discarded')),
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE change_sets IS 'One per build task: its staged writes land whole when it succeeds, or not at all.';
COMMENT ON COLUMN change_sets.status IS 'open | applying | applied | discarded.';
COMMENT ON COLUMN change_sets.result IS 'The task result to write once the set is applied.';

-- change_set_entries: the pending state of one path. A move is a write of
-- the target (from_path set) plus a delete of the source.
CREATE TABLE change_set_entries (
    task_id      uuid NOT NULL REFERENCES change_sets (task_id) ON DELETE CASCADE,
    path         text NOT NULL,
    op           text NOT NULL CHECK (op IN ('write', 'delete')),
    content      bytea CHECK ((op = 'write') = (content IS NOT NULL)),
    from_path    text,
    base_etag    text NOT NULL DEFAULT '',
    ord          integer NOT NULL,
    applied      boolean NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    prior        bytea,
    prior_exists boolean,
    cp           boolean NOT NULL DEFAULT false,
    cp_op        text,
    cp_content   bytea,
    cp_from_path text,
    PRIMARY KEY (task_id, path)
);

COMMENT ON TABLE change_set_entries IS 'A build''s staged change of one path.';
COMMENT ON COLUMN change_set_entries.from_path IS 'The source of a move (whose delete is an entry of its own).';
COMMENT ON COLUMN change_set_entries.base_etag IS 'The version of the file the change was made against ('''' when it did not exist): applying refuses a file someone else changed meanwhile.';
COMMENT ON COLUMN change_set_entries.ord IS 'Order of first change: entries are applied in the order the agent made them.';
COMMENT ON COLUMN change_set_entries.prior IS 'What the path held before the set was applied, recorded when the set is marked applying, so an apply stopped by a conflict, even after a crash, puts back what it wrote.';
COMMENT ON COLUMN change_set_entries.prior_exists IS 'false: the path held nothing before the apply; NULL: not recorded yet.';
COMMENT ON COLUMN change_set_entries.cp IS 'The entry existed at the task''s last checkpoint; cp_* is what it held then. A resumed attempt puts the entries back to that view first.';

-- build_decisions: the steps of a plan-driven build, by decision id, so a
-- repeated decision is executed once.
CREATE TABLE build_decisions (
    task_id     uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    decision_id text NOT NULL,
    status      text NOT NULL CHECK (status IN ('accepted', 'rejected')),
    outcome     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, decision_id)
);

COMMENT ON TABLE build_decisions IS 'The executed steps of a plan-driven build, by decision id: a repeated decision runs once.';

-- task_checkpoints: the conversation and loop state of a task after its last
-- finished iteration, so a new attempt (River retry, takeover, resume,
-- answer) continues where the last one stopped. Dropped when the task ends.
CREATE TABLE task_checkpoints (
    task_id    uuid PRIMARY KEY REFERENCES ai_tasks (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    iteration  integer NOT NULL,
    messages   jsonb NOT NULL,
    state      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE task_checkpoints IS 'A task''s conversation and loop state after its last finished iteration; dropped when the task ends.';
COMMENT ON COLUMN task_checkpoints.attempt IS 'The attempt that wrote it.';
COMMENT ON COLUMN task_checkpoints.messages IS 'The conversation.';
COMMENT ON COLUMN task_checkpoints.state IS 'The loop''s counters: usage, cost, repair state, touched files, a pending question.';

-- Values a task rewrites as it runs (a checkpoint's conversation every
-- iteration, a build's staged contents) are compressed with lz4, cheaper
-- than pglz to write and to read. A server built without lz4 keeps pglz.
DO $$
BEGIN
    ALTER TABLE task_checkpoints
        ALTER COLUMN messages SET COMPRESSION lz4,
        ALTER COLUMN state SET COMPRESSION lz4;
    ALTER TABLE change_set_entries
        ALTER COLUMN content SET COMPRESSION lz4,
        ALTER COLUMN cp_content SET COMPRESSION lz4,
        ALTER COLUMN prior SET COMPRESSION lz4;
    ALTER TABLE agent_events
        ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: written values stay compressed with pglz';
END
$$;

------------------------------------------------------------------------------
-- 2. State machines and guards
------------------------------------------------------------------------------

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

COMMENT ON TABLE agentworker_task_transitions IS 'The legal moves of ai_tasks.status; sql.CanTransition mirrors it.';

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

COMMENT ON TABLE agentworker_run_transitions IS 'The legal moves of task_runs.status; sql.CanTransitionRun mirrors it.';

-- Every status change of a task, by any writer (the worker, a control
-- function, PostgREST, psql), must be a legal move, and a task starts queued
-- or paused. A status change bumps version when the writer did not. A move
-- into running starts a new holder (fence + 1); a task that stops running
-- loses its lease. A move from running back to queued is a hand-back only
-- the lease sweeper, the worker and the control functions make (they say so
-- with agentworker.requeue): any other writer would leave the holder running
-- while a new job starts a second run.
CREATE FUNCTION ai_tasks_guard_status() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
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

-- The WHEN clause of each status trigger is exactly the test its function
-- starts with, so an update that would do nothing calls nothing.
CREATE TRIGGER ai_tasks_guard_status BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION ai_tasks_guard_status();

-- A run starts queued or running and moves only as its machine allows;
-- next_retry_at belongs to retry_scheduled alone.
CREATE FUNCTION task_runs_guard_status() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
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

-- A task that succeeded leaves a task_completed inbox item, whoever finished it.
CREATE FUNCTION ai_tasks_inbox_completed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
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
    FOR EACH ROW WHEN (NEW.status = 'succeeded' AND OLD.status <> 'succeeded')
    EXECUTE FUNCTION ai_tasks_inbox_completed();

------------------------------------------------------------------------------
-- 3. Pickup and claim
------------------------------------------------------------------------------

-- One River job for a task, as River's own insert makes it; River's insert
-- channel is notified so a worker fetches it at once instead of on its poll.
CREATE FUNCTION agentworker_enqueue_task(p_task_id uuid) RETURNS bigint
LANGUAGE plpgsql AS $$
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

-- Pickup: queued tasks inserted by anyone (psql, PostgREST, an edge
-- function) get their River jobs in the same transaction, one insert and
-- one notification per statement, however many rows it inserts. Submit from
-- Go inserts the job itself with River's InsertTx (agentworker.skip_enqueue).
CREATE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- Submit from Go inserts the job itself with River's InsertTx.
    IF coalesce(current_setting('agentworker.skip_enqueue', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
    SELECT jsonb_build_object('task_id', n.id), 'ai_task', 'ai_tasks', 5, 1, 'available'
    FROM new_rows n WHERE n.status = 'queued';
    IF FOUND THEN
        PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_enqueue AFTER INSERT ON ai_tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_enqueue();

-- A task moved back to queued (resume, retry, answer, takeover, or an app's
-- own UPDATE) gets a fresh job, exactly as an inserted one does, except when
-- the writer keeps the job it has (a worker snoozing a task until its retry).
CREATE FUNCTION ai_tasks_requeue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status = 'queued' AND OLD.status <> 'queued'
       AND coalesce(current_setting('agentworker.skip_enqueue', true), '') <> 'on' THEN
        PERFORM agentworker_enqueue_task(NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_requeue AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued')
    EXECUTE FUNCTION ai_tasks_requeue();

-- The reconciler looks up live jobs by task id.
CREATE INDEX river_job_ai_task_idx ON river_job ((args ->> 'task_id')) WHERE kind = 'ai_task';

-- River's job cancellation, as river.Client.JobCancel does it: a job not yet
-- running is cancelled at once; a running one is marked (so River's rescuer
-- never retries it) and its client is told on River's control channel, which
-- cancels the job's context within milliseconds.
CREATE FUNCTION agentworker_cancel_river_job(p_job_id bigint) RETURNS void
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

-- Takeover: running tasks whose lease lapsed (their worker died or lost the
-- database), or that run without one (set running by a writer that is not a
-- worker), go back to the queue; their run is interrupted and their old job
-- cancelled so River's rescuer never runs it again. Any replica may call
-- this; SKIP LOCKED keeps two sweeps from taking the same task.
CREATE FUNCTION agentworker_take_over_lapsed(p_limit integer DEFAULT 100)
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
-- duplicates).
CREATE FUNCTION agentworker_flag_idle(p_idle interval)
RETURNS TABLE (task_id uuid, idle_for interval)
LANGUAGE plpgsql AS $$
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

------------------------------------------------------------------------------
-- 4. Events and announcements
------------------------------------------------------------------------------

-- seq is always the database's, taken under the task row's lock, so seq
-- order is commit order for one task, whoever writes. A holder's batch of n
-- events takes last_seq+1 … last_seq+n in its own update of the task row
-- (which is also its fence check) and marks the statement with
-- agentworker.seq = 'statement'; the row trigger then leaves the seqs it was
-- given alone. Every other writer's rows get their seq here; a row for a
-- missing task fails with foreign_key_violation.
CREATE FUNCTION agent_events_assign_seq() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
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

CREATE TRIGGER agent_events_assign_seq BEFORE INSERT ON agent_events
    FOR EACH ROW
    WHEN (NEW.seq IS NULL OR current_setting('agentworker.seq', true) IS DISTINCT FROM 'statement')
    EXECUTE FUNCTION agent_events_assign_seq();

-- Announcements: NOTIFY takes one cluster-wide lock held through commit, so
-- the worker writes events without notifying and announces them after
-- commit, coalesced per process (events.Announcer); it marks its statement
-- with agentworker.announce = 'after_commit'. Events written by anyone else
-- (psql, PostgREST, the control functions) are announced here, once per
-- statement. A payload names the tasks and projects with new events, never
-- content:
--   {"tasks": ["<task id>", …], "projects": ["<project id>", …]}
-- Listeners read from their own cursor, so a merged or lost announcement
-- costs latency only. The trigger consumes both statement marks, so neither
-- outlives the statement that set it.

-- Task/project pairs split into payloads that fit NOTIFY's 8000-byte limit
-- (90 pairs: json_agg writes ~40 bytes an id, so at most ~7,300 bytes).
CREATE FUNCTION agentworker_announce_payloads(p_tasks uuid[], p_projects uuid[])
RETURNS SETOF text
LANGUAGE sql IMMUTABLE AS $$
    SELECT json_build_object(
               'tasks', coalesce(json_agg(DISTINCT t) FILTER (WHERE t IS NOT NULL), '[]'),
               'projects', json_agg(DISTINCT p))::text
    FROM unnest(p_tasks, p_projects) WITH ORDINALITY AS k(t, p, n)
    GROUP BY (n - 1) / 90
$$;

CREATE FUNCTION agent_events_announce() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_payload text;
BEGIN
    IF current_setting('agentworker.seq', true) = 'statement' THEN
        PERFORM set_config('agentworker.seq', '', true);
    END IF;
    IF current_setting('agentworker.announce', true) = 'after_commit' THEN
        PERFORM set_config('agentworker.announce', '', true);
        RETURN NULL;
    END IF;
    FOR v_payload IN
        SELECT agentworker_announce_payloads(array_agg(task_id), array_agg(project_id))
        FROM (SELECT DISTINCT task_id, project_id FROM new_rows) k
        HAVING count(*) > 0
    LOOP
        PERFORM pg_notify('agent_events', v_payload);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_events_announce AFTER INSERT ON agent_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION agent_events_announce();

-- What a foreign key on agent_events.task_id would do besides checking:
-- a deleted task's events go with it (one delete per statement), and
-- TRUNCATE ai_tasks CASCADE empties the events of tasks (project events name
-- no task and stay).
CREATE FUNCTION ai_tasks_delete_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events e USING old_rows o WHERE e.task_id = o.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_delete_events AFTER DELETE ON ai_tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_delete_events();

CREATE FUNCTION ai_tasks_truncate_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM agent_events WHERE task_id IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_truncate_events AFTER TRUNCATE ON ai_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION ai_tasks_truncate_events();

-- PostgREST's computed relationships (ai_tasks?select=*,agent_events(*) and
-- back): to-many from a task, to-one from an event. Invoker's rights: a
-- caller embeds only rows its policies show.
CREATE FUNCTION agent_events(ai_tasks) RETURNS SETOF agent_events
LANGUAGE sql STABLE AS $$ SELECT * FROM agent_events WHERE task_id = $1.id $$;

CREATE FUNCTION ai_tasks(agent_events) RETURNS SETOF ai_tasks ROWS 1
LANGUAGE sql STABLE AS $$ SELECT * FROM ai_tasks WHERE id = $1.task_id $$;

-- Supabase: where the supabase_realtime publication exists, publish
-- agent_events with full row images (REPLICA IDENTITY FULL), so a
-- supabase-js postgres_changes subscriber works unchanged. Elsewhere, skip.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'supabase_realtime') THEN
        ALTER TABLE agent_events REPLICA IDENTITY FULL;
        IF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                       WHERE pubname = 'supabase_realtime'
                         AND schemaname = current_schema()
                         AND tablename = 'agent_events') THEN
            EXECUTE format('ALTER PUBLICATION supabase_realtime ADD TABLE %I.agent_events', current_schema());
        END IF;
    END IF;
END
$$;

------------------------------------------------------------------------------
-- 5. Change sets and checkpoints
------------------------------------------------------------------------------

-- A pause request lives while the task may still run: any other status
-- clears it.
CREATE FUNCTION ai_tasks_clear_pause() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('running', 'queued') THEN
        NEW.pause_requested := false;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ai_tasks_clear_pause BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('running', 'queued'))
    EXECUTE FUNCTION ai_tasks_clear_pause();

-- A task that ended (succeeded, failed, blocked, cancelled) has nothing to
-- continue: its checkpoint goes, and a change set still open (a paused task
-- cancelled, say) is discarded. A retry starts over.
CREATE FUNCTION ai_tasks_drop_checkpoint() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status THEN
        DELETE FROM task_checkpoints WHERE task_id = NEW.id;
        UPDATE change_sets SET status = 'discarded', updated_at = now() WHERE task_id = NEW.id AND status = 'open';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_drop_checkpoint AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION ai_tasks_drop_checkpoint();

------------------------------------------------------------------------------
-- 6. Control functions
------------------------------------------------------------------------------

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
CREATE FUNCTION agentworker_control_task(
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

-- The control functions apps call, checked against the caller. A task the
-- caller may not see gets the answer a missing task gets, with no audit
-- event either, so the two cannot be told apart.
CREATE FUNCTION agentworker_control_for_caller(
    p_task_id uuid, p_action text, p_expected_version integer, p_actor text, p_answer text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ai_tasks WHERE id = p_task_id AND agentworker_caller_may_access(project_id)) THEN
        RETURN jsonb_build_object('outcome', 'not_found', 'task_id', p_task_id, 'action', p_action,
            'error', format('task %s not found', p_task_id));
    END IF;
    RETURN agentworker_control_task(p_task_id, p_action, p_expected_version, p_actor, p_answer);
END
$$;

-- The per-action entry points, for PostgREST (POST /rpc/agentworker_cancel_task).
CREATE FUNCTION agentworker_cancel_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'cancel', expected_version, actor) $$;

CREATE FUNCTION agentworker_pause_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'pause', expected_version, actor) $$;

CREATE FUNCTION agentworker_resume_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'resume', expected_version, actor) $$;

CREATE FUNCTION agentworker_retry_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'retry', expected_version, actor) $$;

CREATE FUNCTION agentworker_answer_input(task_id uuid, answer text, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'answer', expected_version, actor, answer) $$;

------------------------------------------------------------------------------
-- 7. Usage
------------------------------------------------------------------------------

-- No row shared between tasks is updated on a task's path: every run's
-- tokens and cost stay on its own task_runs row and these views sum them on
-- read (security_invoker: a reader sees the runs its policies show).

-- Every project together, for service_role: a run counts once it stopped
-- running, on the UTC day it finished.
CREATE VIEW usage_daily WITH (security_invoker = true) AS
SELECT (coalesce(r.finished_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
       coalesce(t.model, 'unknown') AS model,
       count(*) AS runs,
       sum(r.tokens_in)::bigint AS tokens_in,
       sum(r.tokens_out)::bigint AS tokens_out,
       sum(r.cost)::numeric(14, 6) AS cost
FROM task_runs r
JOIN ai_tasks t ON t.id = r.task_id
WHERE r.status NOT IN ('queued', 'running')
GROUP BY 1, 2;

COMMENT ON VIEW usage_daily IS 'Tokens and cost by UTC day and model, every project together, summed on read from finished runs.';

-- By project, for apps: runs still running count with what they spent so far.
CREATE VIEW project_usage_daily WITH (security_invoker = true) AS
SELECT t.project_id,
       (coalesce(r.finished_at, r.started_at, r.created_at) AT TIME ZONE 'UTC')::date AS day,
       coalesce(t.model, 'unknown') AS model,
       count(*) AS runs,
       sum(r.tokens_in)::bigint AS tokens_in,
       sum(r.tokens_out)::bigint AS tokens_out,
       sum(r.cost) AS cost
FROM task_runs r
JOIN ai_tasks t ON t.id = r.task_id
GROUP BY 1, 2, 3;

COMMENT ON VIEW project_usage_daily IS 'Tokens and cost by project, UTC day and model, read with the caller''s rights.';

------------------------------------------------------------------------------
-- 8. Row level security
------------------------------------------------------------------------------

-- Apps reach these tables through PostgREST, Supabase Realtime or SQL, and
-- each caller sees only the projects its token names. The database enforces
-- it, not only the gateway. Roles, named as Supabase and PostgREST name them:
--   anon           no token: nothing at all.
--   authenticated  a user's token. Its "projects" claim (a JSON array of
--                  project ids, the claim the SSE gateway reads), found in
--                  request.jwt.claims as PostgREST sets it, lists the
--                  projects it may see. It reads their ai_tasks,
--                  agent_events, task_runs, inbox_items and
--                  project_usage_daily; inserts queued ai_tasks into them
--                  (project_id, type, prompt, input); and calls the control
--                  functions on their tasks. Another project's task is
--                  answered exactly as a missing one.
--   service_role   a trusted backend: every project. Reads the API tables
--                  and usage_daily, inserts, updates and deletes ai_tasks,
--                  calls the control functions.
-- Every other table (checkpoints, change sets, decisions, transitions,
-- River's, agentworker_migrations) is internal: for the owner only. The
-- owner of the tables (the role that runs the migrations, which the worker
-- connects as) is not subject to row level security.
--
-- THE RULE FOR EVERY LATER MIGRATION. sql/isolation_test.go reads the
-- catalog and fails on any table, view, sequence or function of the schema
-- that breaks it (Supabase's default privileges grant everything a
-- migration creates in public to anon, authenticated and service_role):
--   * table: ALTER TABLE t ENABLE ROW LEVEL SECURITY;
--            REVOKE ALL ON t FROM PUBLIC, anon, authenticated, service_role;
--     That makes it internal. A table apps may read also gets its GRANTs
--     and policies keyed on agentworker_jwt_projects() like agent_events
--     below, and a line in the test's access table.
--   * view: the same REVOKE; one apps read is WITH (security_invoker = true)
--     so the tables' policies apply to the caller.
--   * sequence: the same REVOKE.
--   * function: REVOKE ALL ON FUNCTION f FROM PUBLIC, anon, authenticated,
--     service_role; ALTER FUNCTION f SET search_path = <schema>, pg_temp.
--     A trigger function of a table apps write is SECURITY DEFINER, so the
--     bookkeeping it does runs as the owner whoever writes. A function apps
--     call is SECURITY DEFINER, refuses what agentworker_caller_may_access
--     refuses, and is granted to authenticated and service_role.
--   The pinned search_path is every name's qualification: it holds only this
--   schema and, last, pg_temp (which Postgres would otherwise search first
--   for tables), so no caller can put an object of its own in the way.
--
-- Plain Postgres: a role that does not exist is created NOLOGIN, as
-- PostgREST's docs do (creating roles needs CREATEROLE; without it, create
-- them first). Roles belong to the cluster: creation is idempotent and safe
-- when several databases migrate at once, and nothing here drops a role.
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['anon', 'authenticated', 'service_role'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION
            -- Another database of the cluster created it meanwhile.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role % does not exist and % may not create it', v_role, current_user
                    USING HINT = 'create the roles anon, authenticated and service_role (NOLOGIN) first, or migrate as a role with CREATEROLE',
                          ERRCODE = 'insufficient_privilege';
        END;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO authenticated, service_role', current_schema());
END
$$;

-- The project ids the caller's token names: request.jwt.claims ->
-- 'projects', ids that are not uuids ignored. Policies call it as
-- (SELECT agentworker_jwt_projects())::uuid[]: a subquery, which Postgres
-- evaluates once per query, not once per row (the cast keeps "= ANY" from
-- reading it as a set of rows).
CREATE FUNCTION agentworker_jwt_projects() RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(p::uuid), '{}')
    FROM jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(nullif(current_setting('request.jwt.claims', true), '')::jsonb -> 'projects') = 'array'
             THEN nullif(current_setting('request.jwt.claims', true), '')::jsonb -> 'projects'
             ELSE '[]'::jsonb END) AS p
    WHERE p ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;

-- Whether the caller of a SECURITY DEFINER function may act on a project,
-- by the rule row level security applies to the tables: the owner and
-- service_role (and roles that have their privileges) on every project,
-- anyone else on the projects its token names. Inside SECURITY DEFINER,
-- current_user is the owner; the caller is the role PostgREST (or the
-- session) SET, else the session user.
CREATE FUNCTION agentworker_caller_may_access(p_project_id uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(c.caller, 'service_role', 'USAGE')
        OR pg_has_role(c.caller, (SELECT relowner FROM pg_class WHERE oid = 'ai_tasks'::regclass), 'USAGE')
        OR p_project_id = ANY (agentworker_jwt_projects())
    FROM (SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)::name AS caller) AS c
$$;

-- River's objects and agentworker_migrations: internal. A function, so
-- Migrate applies it again after River adds tables in a later version.
CREATE FUNCTION agentworker_seal_internal() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    FOR v IN
        SELECT c.oid::regclass AS rel, c.relkind
        FROM pg_class c
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND (c.relname LIKE 'river\_%' OR c.relname = 'agentworker_migrations')
    LOOP
        IF v.relkind IN ('r', 'p') THEN
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v.rel);
        END IF;
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, anon, authenticated, service_role', v.rel);
    END LOOP;
    FOR v IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p
        WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND p.proname LIKE 'river\_%'
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v.fn);
    END LOOP;
END
$$;

-- Every table and view of ours is internal until granted below; every
-- function of ours is executable by the owner only, with the pinned
-- search_path, until granted below.
DO $$
DECLARE
    v_schema text := current_schema();
    v        record;
BEGIN
    FOR v IN
        SELECT c.oid::regclass AS rel, c.relkind
        FROM pg_class c
        WHERE c.relnamespace = v_schema::regnamespace
          AND c.relkind IN ('r', 'p', 'v', 'S')
          AND c.relname NOT LIKE 'river\_%' AND c.relname <> 'agentworker_migrations'
    LOOP
        IF v.relkind IN ('r', 'p') THEN
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v.rel);
        END IF;
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, anon, authenticated, service_role', v.rel);
    END LOOP;
    FOR v IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p
        WHERE p.pronamespace = v_schema::regnamespace AND p.proname NOT LIKE 'river\_%'
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v.fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v.fn, v_schema);
    END LOOP;
END
$$;

SELECT agentworker_seal_internal();

-- ai_tasks: owners read their projects' tasks and insert queued ones.
GRANT SELECT, INSERT, UPDATE, DELETE ON ai_tasks TO service_role;
GRANT SELECT ON ai_tasks TO authenticated;
GRANT INSERT (project_id, type, prompt, input) ON ai_tasks TO authenticated;
CREATE POLICY ai_tasks_service ON ai_tasks TO service_role USING (true) WITH CHECK (true);
CREATE POLICY ai_tasks_read_own ON ai_tasks FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));
CREATE POLICY ai_tasks_insert_own ON ai_tasks FOR INSERT TO authenticated
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]) AND status = 'queued');

-- agent_events and inbox_items: read by project.
GRANT SELECT ON agent_events, inbox_items TO authenticated, service_role;
CREATE POLICY agent_events_service ON agent_events TO service_role USING (true) WITH CHECK (true);
CREATE POLICY agent_events_read_own ON agent_events FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));
CREATE POLICY inbox_items_service ON inbox_items TO service_role USING (true) WITH CHECK (true);
CREATE POLICY inbox_items_read_own ON inbox_items FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

-- task_runs: read by the project of their task.
GRANT SELECT ON task_runs TO authenticated, service_role;
CREATE POLICY task_runs_service ON task_runs TO service_role USING (true) WITH CHECK (true);
CREATE POLICY task_runs_read_own ON task_runs FOR SELECT TO authenticated
    USING (task_id IN (SELECT id FROM ai_tasks WHERE project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[])));

-- Usage: every project's together for service_role only; by project for both.
GRANT SELECT ON usage_daily TO service_role;
GRANT SELECT ON project_usage_daily TO authenticated, service_role;

GRANT EXECUTE ON FUNCTION
    agentworker_jwt_projects(),
    agentworker_cancel_task(uuid, integer, text),
    agentworker_pause_task(uuid, integer, text),
    agentworker_resume_task(uuid, integer, text),
    agentworker_retry_task(uuid, integer, text),
    agentworker_answer_input(uuid, text, integer, text),
    agent_events(ai_tasks),
    ai_tasks(agent_events)
TO authenticated, service_role;
