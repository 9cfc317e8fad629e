-- ai_tasks: the work queue apps write to. One row per task; River jobs are
-- created for it by the pickup trigger below.
CREATE TABLE ai_tasks (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   uuid NOT NULL,
    type         text NOT NULL CHECK (type IN ('chat', 'plan', 'build')),
    status       text NOT NULL DEFAULT 'queued' CHECK (status IN (
                     'queued', 'running', 'succeeded', 'failed', 'blocked',
                     'cancelled', 'paused', 'awaiting_input')),
    prompt       text,
    input        jsonb NOT NULL DEFAULT '{}',
    result       jsonb,
    error        jsonb,
    model        text,
    attempt      integer NOT NULL DEFAULT 0,
    tokens_in    bigint NOT NULL DEFAULT 0,
    tokens_out   bigint NOT NULL DEFAULT 0,
    tokens       bigint GENERATED ALWAYS AS (tokens_in + tokens_out) STORED,
    cost         numeric(14, 6) NOT NULL DEFAULT 0,
    -- last_seq is the per-task event counter; agent_events.seq comes from it.
    last_seq     integer NOT NULL DEFAULT 0,
    -- river_job_id is the job that holds the current claim.
    river_job_id bigint,
    version      integer NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);

CREATE INDEX ai_tasks_project_id_idx ON ai_tasks (project_id, created_at DESC);
CREATE INDEX ai_tasks_queued_idx ON ai_tasks (created_at) WHERE status = 'queued';

-- task_runs: one row per River attempt at a task.
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

-- agent_events: the typed, ordered timeline of each task.
CREATE TABLE agent_events (
    id          bigserial PRIMARY KEY,
    task_id     uuid REFERENCES ai_tasks (id) ON DELETE CASCADE,
    project_id  uuid NOT NULL,
    seq         integer,
    type        text NOT NULL CHECK (type IN (
                    'agent_phase', 'tool_call', 'file_update', 'self_repair',
                    'log', 'error', 'progress')),
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (task_id, seq),
    CHECK (task_id IS NULL OR seq IS NOT NULL)
);

CREATE INDEX agent_events_project_id_idx ON agent_events (project_id, id);

-- Assign the per-task seq under the task row's lock, so seq order is commit
-- order for one task, whoever writes (the worker, a SQL function, psql).
CREATE FUNCTION agent_events_assign_seq() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.task_id IS NOT NULL AND NEW.seq IS NULL THEN
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
    FOR EACH ROW EXECUTE FUNCTION agent_events_assign_seq();

-- NOTIFY carries only a small key; listeners read the row itself. Postgres
-- caps a payload at 8000 bytes, and content may hold secrets or be large.
CREATE FUNCTION agent_events_notify() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify('agent_events', json_build_object(
        'id', NEW.id,
        'task_id', NEW.task_id,
        'project_id', NEW.project_id,
        'seq', NEW.seq,
        'type', NEW.type)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_events_notify AFTER INSERT ON agent_events
    FOR EACH ROW EXECUTE FUNCTION agent_events_notify();

-- Pickup: a queued task inserted by anyone (psql, PostgREST, an edge
-- function) gets a River job in the same transaction, and River's insert
-- channel is notified so a worker fetches it at once instead of on its poll.
CREATE FUNCTION ai_tasks_enqueue() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    -- Submit from Go inserts the job itself with River's InsertTx.
    IF NEW.status = 'queued'
       AND coalesce(current_setting('agentworker.skip_enqueue', true), '') <> 'on' THEN
        INSERT INTO river_job (args, kind, queue, max_attempts, priority, state)
        VALUES (jsonb_build_object('task_id', NEW.id), 'ai_task', 'ai_tasks', 5, 1, 'available');
        PERFORM pg_notify(current_schema() || '.river_insert', '{"queue": "ai_tasks"}');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ai_tasks_enqueue AFTER INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_enqueue();

-- The reconciler looks up live jobs by task id.
CREATE INDEX river_job_ai_task_idx ON river_job ((args ->> 'task_id')) WHERE kind = 'ai_task';
