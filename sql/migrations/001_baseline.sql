-- The baseline: agentworker's tables, as one file, grouped by concern:
-- their columns, keys, indexes, comments, the rows they start with, and
-- their privileges. Functions, triggers, views and policies are not here:
-- each is defined once, in its file under sql/functions, applied after the
-- migrations and again whenever the file changes. Later migrations (002_…)
-- hold tables, columns, indexes, data moves and drops only, and a landed
-- migration never changes: this file took in 002 to 013 while nothing was
-- deployed. sql/schema.sql shows the schema as it is, generated from a
-- migrated database.
--
--   1. Tables
--   2. State machines
--   3. Row level security
--   4. The task graph
--   5. Token revocation
--   6. The machine's columns
--   7. Provider budgets
--   8. Refusals audited
--   9. Review
--   10. Documents
--   11. Trace ids
--   12. Usage that outlives its runs
--   13. The events archive
--   14. A task's event id floor
--   15. Sealed days
--
-- A migration runs before the function files: it calls none of our
-- functions (a data move is plain SQL).

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
                         'cancelled', 'paused', 'awaiting_input', 'waiting', 'review')),
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

CREATE SEQUENCE agent_events_id_seq;
CREATE TABLE agent_events (
    id          bigint NOT NULL DEFAULT nextval('agent_events_id_seq'),
    task_id     uuid,
    project_id  uuid NOT NULL,
    seq         integer,
    type        text NOT NULL CONSTRAINT agent_events_type_check CHECK (type IN (
                    'agent_phase', 'tool_call', 'file_update', 'self_repair',
                    'log', 'error', 'progress')),
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    batch       uuid,
    PRIMARY KEY (id, created_at),
    CONSTRAINT agent_events_task_id_seq_key UNIQUE (task_id, seq, created_at),
    CONSTRAINT agent_events_check CHECK (task_id IS NULL OR seq IS NOT NULL)
) PARTITION BY RANGE (created_at);

ALTER SEQUENCE agent_events_id_seq OWNED BY agent_events.id;

COMMENT ON TABLE agent_events IS 'The typed, ordered timeline of each task (and project-level events with no task), partitioned by UTC day of created_at.';
COMMENT ON COLUMN agent_events.task_id IS 'The task, without a foreign key: an insert for a missing task fails with SQLSTATE 23503, deleting a task deletes its events.';
COMMENT ON COLUMN agent_events.seq IS 'Per task, from 1, in commit order for the task whoever writes; always the database''s. Unique per task across partitions: taken from ai_tasks.last_seq under the task row''s lock.';
COMMENT ON COLUMN agent_events.type IS 'agent_phase | tool_call | file_update | self_repair | log | error | progress.';
COMMENT ON COLUMN agent_events.created_at IS 'The partition key; one partition a UTC day (agent_events_pYYYYMMDD), agent_events_default for days without one.';
COMMENT ON COLUMN agent_events.xid IS 'The writing transaction: a project cursor is (xid, id), read below the snapshot''s xmin.';
COMMENT ON COLUMN agent_events.batch IS 'Idempotency key of one write of events, on its first row: a write resent after a lost reply inserts nothing.';

CREATE INDEX agent_events_project_xid_idx ON agent_events (project_id, xid, id);
CREATE UNIQUE INDEX agent_events_batch_idx ON agent_events (task_id, batch, created_at) WHERE batch IS NOT NULL;
CREATE INDEX agent_events_phase_xid_idx ON agent_events (xid) WHERE type = 'agent_phase';
CREATE INDEX agent_events_log_idx ON agent_events (project_id, id) WHERE type = 'log';

-- inbox_items: what waits for a person.
CREATE TABLE inbox_items (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  uuid NOT NULL,
    task_id     uuid REFERENCES ai_tasks (id) ON DELETE CASCADE,
    run_id      uuid REFERENCES task_runs (id) ON DELETE SET NULL,
    kind        text NOT NULL CHECK (kind IN ('await_user_input', 'task_completed', 'review_requested')),
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
COMMENT ON COLUMN inbox_items.kind IS 'await_user_input | task_completed | review_requested.';
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

-- Days no day partition covers: the leader moves their rows into their
-- day's partition. Made after the compression of payload, which it takes.
CREATE TABLE agent_events_default PARTITION OF agent_events DEFAULT;

COMMENT ON TABLE agent_events_default IS 'Events of a time no day partition covers; the leader moves them into their day''s partition.';

------------------------------------------------------------------------------
-- 2. State machines
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

-- The reconciler looks up live jobs by task id.
CREATE INDEX river_job_ai_task_idx ON river_job ((args ->> 'task_id')) WHERE kind = 'ai_task';

-- Supabase: where the supabase_realtime publication exists, publish
-- agent_events with full row images (REPLICA IDENTITY FULL), so a
-- supabase-js postgres_changes subscriber works unchanged, as the parent
-- table (publish_via_partition_root: changes arrive as agent_events', not
-- as a day partition's). Elsewhere, skip.
DO $$
DECLARE
    v regclass;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'supabase_realtime') THEN
        ALTER TABLE agent_events REPLICA IDENTITY FULL;
        FOR v IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'agent_events'::regclass LOOP
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', v);
        END LOOP;
        ALTER PUBLICATION supabase_realtime SET (publish_via_partition_root = true);
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
-- 3. Row level security
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
-- THE RULE FOR EVERY LATER MIGRATION AND FUNCTION FILE. sql/isolation_test.go
-- reads the catalog and fails on any table, view, sequence or function of
-- the schema that breaks it (Supabase's default privileges grant
-- everything a migration creates in public to anon, authenticated and
-- service_role):
--   * table: ALTER TABLE t ENABLE ROW LEVEL SECURITY;
--            REVOKE ALL ON t FROM PUBLIC, anon, authenticated, service_role;
--     That makes it internal. A table apps may read also gets its GRANTs,
--     policies keyed on agentworker_jwt_projects() (sql/functions/access.sql)
--     and a line in the test's access table.
--   * view (in a function file): the same REVOKE; one apps read is
--     WITH (security_invoker = true) so the tables' policies apply to the
--     caller.
--   * sequence: the same REVOKE.
--   * function (in a function file): named in the file's call of
--     agentworker_make_internal, which revokes it from everyone and pins
--     its search_path (SET search_path = <schema>, pg_temp).
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

-- Every table of ours is internal until granted below.
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
          AND c.relname NOT LIKE 'river\_%' AND c.relname NOT IN ('agentworker_migrations', 'agentworker_function_files')
    LOOP
        IF v.relkind IN ('r', 'p') THEN
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v.rel);
        END IF;
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, anon, authenticated, service_role', v.rel);
    END LOOP;
END
$$;

-- ai_tasks: owners read their projects' tasks and insert queued ones.
GRANT SELECT, INSERT, UPDATE, DELETE ON ai_tasks TO service_role;
GRANT SELECT ON ai_tasks TO authenticated;
GRANT INSERT (project_id, type, prompt, input) ON ai_tasks TO authenticated;

-- agent_events and inbox_items: read by project.
GRANT SELECT ON agent_events, inbox_items TO authenticated, service_role;

-- task_runs: read by the project of their task.
GRANT SELECT ON task_runs TO authenticated, service_role;

------------------------------------------------------------------------------
-- 4. The task graph
------------------------------------------------------------------------------

-- A project's work as a graph: agents that tasks run as, dependencies
-- between tasks (a task waits until every task it depends on succeeded),
-- a priority River works by, and a parent task.

------------------------------------------------------------------------------
-- Agents
------------------------------------------------------------------------------

CREATE TABLE agents (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id uuid NOT NULL,
    name       text NOT NULL CHECK (btrim(name) <> '' AND length(name) <= 100),
    role       text NOT NULL DEFAULT '',
    model      text,
    persona    text NOT NULL DEFAULT '',
    tools      text[],
    status     text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
    version    integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

COMMENT ON TABLE agents IS 'The agents a project''s tasks run as: a persona in every prompt, a model, the tools it may use.';
COMMENT ON COLUMN agents.name IS 'Unique in its project; a plan names agents by it.';
COMMENT ON COLUMN agents.persona IS 'The agent''s persona, in the system prompt of every model call of its tasks.';
COMMENT ON COLUMN agents.model IS 'The model of its tasks that name none; the worker''s LLM_MODEL when NULL.';
COMMENT ON COLUMN agents.tools IS 'The tools it may use, narrowing what its task type allows (never widening it); NULL: all the type allows.';
COMMENT ON COLUMN agents.version IS 'Optimistic version: an update or delete names the version it read.';

------------------------------------------------------------------------------
-- Tasks: agent, priority, parent, waiting
------------------------------------------------------------------------------

ALTER TABLE ai_tasks
    ADD COLUMN agent_id       uuid REFERENCES agents (id) ON DELETE SET NULL,
    ADD COLUMN priority       smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4),
    ADD COLUMN parent_task_id uuid REFERENCES ai_tasks (id) ON DELETE SET NULL;

CREATE INDEX ai_tasks_agent_idx ON ai_tasks (agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX ai_tasks_parent_idx ON ai_tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

COMMENT ON COLUMN ai_tasks.agent_id IS 'The agent the task runs as (an enabled agent of its project).';
COMMENT ON COLUMN ai_tasks.priority IS '1 (most urgent) … 4; River''s job priority, so urgent tasks start first when more are ready than workers.';
COMMENT ON COLUMN ai_tasks.parent_task_id IS 'A task of the same project this one is part of: cancelling it cancels its unfinished children.';

-- waiting: the task has a dependency that has not succeeded yet, and no
-- River job.
INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('queued', 'waiting'),    -- a dependency is added before the task starts
    ('waiting', 'queued'),    -- its last dependency succeeded
    ('waiting', 'blocked'),   -- a dependency failed, was cancelled or blocked
    ('waiting', 'cancelled'),
    ('waiting', 'paused'),
    ('blocked', 'waiting');   -- the failed dependency is retried

------------------------------------------------------------------------------
-- Dependencies
------------------------------------------------------------------------------

-- task_dependencies: task_id waits until depends_on_task_id succeeded. Rows
-- come in the task's own transaction, or later while it has not started.
-- depends_on_task_id has no foreign key: deleting a task others depend on is
-- refused with TASK_HAS_DEPENDENTS (ai_tasks_delete_dependencies), which a
-- key's own error could not say.
CREATE TABLE task_dependencies (
    task_id            uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    depends_on_task_id uuid NOT NULL,
    project_id         uuid NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, depends_on_task_id)
);

CREATE INDEX task_dependencies_depends_on_idx ON task_dependencies (depends_on_task_id);

COMMENT ON TABLE task_dependencies IS 'task_id waits (status waiting, no River job) until depends_on_task_id succeeded.';
COMMENT ON COLUMN task_dependencies.project_id IS 'The project of both tasks; set by the database.';

CREATE TABLE tasks_md_cursor (
    id  boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid xid8 NOT NULL DEFAULT '0'
);

INSERT INTO tasks_md_cursor DEFAULT VALUES;

COMMENT ON TABLE tasks_md_cursor IS 'How far the tasks.md renderer has read the agent_phase events: every event below xid is rendered.';

------------------------------------------------------------------------------
-- Row level security (the baseline's rule)
------------------------------------------------------------------------------

ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE task_dependencies ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks_md_cursor ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON agents, task_dependencies, tasks_md_cursor FROM PUBLIC, anon, authenticated, service_role;

GRANT SELECT, INSERT, UPDATE, DELETE ON agents TO authenticated, service_role;
GRANT SELECT, INSERT, DELETE ON task_dependencies TO service_role;
GRANT SELECT ON task_dependencies TO authenticated;
GRANT INSERT (task_id, depends_on_task_id) ON task_dependencies TO authenticated;
GRANT INSERT (agent_id, priority, parent_task_id) ON ai_tasks TO authenticated;

------------------------------------------------------------------------------
-- 5. Token revocation
------------------------------------------------------------------------------

-- An operator refuses every bearer token issued
-- before a moment, for one project or for every token (scope '*', service
-- tokens included). serve's /v1 guard refuses a token whose iat is before
-- the latest not_before of its scopes (its projects and '*'), or that has no
-- iat once one applies. `agentworker revoke` writes the rows.
CREATE TABLE agentworker_token_epochs (
    scope      text PRIMARY KEY
               CHECK (scope = '*' OR scope ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
    not_before timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Internal: for the owner only (the rule of section 3).
ALTER TABLE agentworker_token_epochs ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON agentworker_token_epochs FROM PUBLIC, anon, authenticated, service_role;

------------------------------------------------------------------------------
-- 6. The machine's columns
------------------------------------------------------------------------------

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
END
$$;

------------------------------------------------------------------------------
-- 7. Provider budgets
------------------------------------------------------------------------------

-- The model providers' rate limits, shared by the replicas calling them.
--
-- A provider limits an API key, not a process. Every replica calling an
-- endpoint and model keeps one row here: its view of the key's limit and
-- a lease it renews about every second while it calls. Each replica paces
-- itself at its part of the limit the live rows agree on, by the calls
-- each had queued (demand), so together they stay within it; a replica that stops renewing (idle, or
-- dead) stops taking a share when its lease ends. Rows are small and
-- rewritten often: the table is internal and never read by apps.
CREATE TABLE llm_provider_budget (
    endpoint      text NOT NULL,
    model         text NOT NULL,
    replica       text NOT NULL,
    -- Requests and tokens per second the provider allows the key, all
    -- replicas together, as this replica sees it (0: unknown).
    rps           double precision NOT NULL CHECK (rps >= 0),
    tps           double precision NOT NULL DEFAULT 0 CHECK (tps >= 0),
    -- rps was read from the provider's x-ratelimit headers, rather than
    -- estimated from its refusals.
    learned       boolean NOT NULL DEFAULT false,
    -- rps is still being raised from a cautious start.
    probing       boolean NOT NULL DEFAULT false,
    -- When rps last changed, by the database's clock: the newest estimate
    -- is the one the replicas follow.
    changed_at    timestamptz NOT NULL DEFAULT now(),
    -- This replica's weight in the share: the calls it had queued, and 1.
    demand        double precision NOT NULL DEFAULT 1 CHECK (demand >= 1),
    -- The provider asked every caller to wait until then.
    blocked_until timestamptz,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (endpoint, model, replica)
) WITH (fillfactor = 50);

ALTER TABLE llm_provider_budget ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON llm_provider_budget FROM PUBLIC, anon, authenticated, service_role;

------------------------------------------------------------------------------
-- 8. Refusals audited
------------------------------------------------------------------------------

-- One row per refused API request (a bad or expired token, another
-- project's resource, a sensitive file, an illegal transition), written by
-- the API, at most so many per actor and minute: suppressed counts the
-- refusals of the actor left out since its previous row. Allowed control
-- actions are audited as events of their task. Read by service_role only.
CREATE TABLE audit_log (
    id          bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    action      text NOT NULL,
    resource    text NOT NULL,
    outcome     text NOT NULL DEFAULT 'denied' CHECK (outcome = 'denied'),
    reason      text NOT NULL,
    remote_addr text NOT NULL DEFAULT '',
    suppressed  integer NOT NULL DEFAULT 0 CHECK (suppressed >= 0)
);

CREATE INDEX audit_log_at_idx ON audit_log (at);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON audit_log FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON SEQUENCE audit_log_id_seq FROM PUBLIC, anon, authenticated, service_role;

GRANT SELECT ON audit_log TO service_role;

COMMENT ON TABLE audit_log IS 'Refused API requests, at most AuditPerActorPerMinute rows per actor a minute; service_role reads it.';
COMMENT ON COLUMN audit_log.actor IS 'user:<sub> or role:<role> of a valid token; anonymous without one.';
COMMENT ON COLUMN audit_log.action IS 'The route: METHOD and path pattern.';
COMMENT ON COLUMN audit_log.resource IS 'The request path.';
COMMENT ON COLUMN audit_log.reason IS 'Why it was refused: the error code and message (redacted).';
COMMENT ON COLUMN audit_log.suppressed IS 'Refusals of this actor left out since its previous row (over its allowance).';

------------------------------------------------------------------------------
-- 9. Review
------------------------------------------------------------------------------

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

INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('running', 'review'),    -- a build to review finished cleanly
    ('review', 'succeeded'),
    ('review', 'queued'),     -- approved (to apply) or rejected with feedback
    ('review', 'cancelled');  -- rejected without feedback, or cancelled

-- approved: the next attempt only applies the staged change set.
ALTER TABLE ai_tasks ADD COLUMN approved boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN ai_tasks.approved IS 'A task in review was approved: its next attempt applies its change set and nothing else.';

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

------------------------------------------------------------------------------
-- 10. Documents
------------------------------------------------------------------------------

-- An agent may ask for review: a build it runs ends in review as one whose
-- input says review = true does. And the project's documents: its Markdown
-- under docs/ and its rules files, indexed by their front matter so that a
-- task's context inlines the mandatory ones and lists the others.

ALTER TABLE agents ADD COLUMN review boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN agents.review IS 'A build task run by this agent that finishes cleanly ends in review, as one with input.review = true does.';

-- documents: one row per Markdown document of a project's files, as its
-- storage listing last showed it (etag) and its front matter says. The
-- worker keeps it: when a task builds its context, after a build applied
-- changes to documents, and on POST /v1/projects/{id}/docs/index. Front
-- matter is the project's text, hostile input: a malformed or oversized
-- one is ignored (problem says why) and the document is still listed.
CREATE TABLE documents (
    project_id uuid NOT NULL,
    path       text NOT NULL CHECK (path <> '' AND length(path) <= 1024),
    title      text NOT NULL DEFAULT '' CHECK (length(title) <= 200),
    doc_type   text NOT NULL DEFAULT '' CHECK (length(doc_type) <= 50),
    mandatory  boolean NOT NULL DEFAULT false,
    tags       text[] NOT NULL DEFAULT '{}' CHECK (cardinality(tags) <= 20),
    etag       text NOT NULL,
    problem    text CHECK (length(problem) <= 500),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, path)
);

COMMENT ON TABLE documents IS 'A project''s Markdown documents (docs/**/*.md and its rules files) with their front matter; kept current from the storage listing''s etags.';
COMMENT ON COLUMN documents.path IS 'The document''s path in the project''s files.';
COMMENT ON COLUMN documents.title IS 'Front matter title, else the first heading, else the file name.';
COMMENT ON COLUMN documents.doc_type IS 'Front matter type (free text, e.g. rules, guide, adr); rules for a rules file without one.';
COMMENT ON COLUMN documents.mandatory IS 'Front matter mandatory: true: the document''s text is in every task''s prompt (within the context budget); else it is listed by path and title.';
COMMENT ON COLUMN documents.tags IS 'Front matter tags.';
COMMENT ON COLUMN documents.etag IS 'The storage etag the row was read at: a listing with another etag re-reads the document.';
COMMENT ON COLUMN documents.problem IS 'Why the front matter was ignored (malformed, too large), if it was.';
COMMENT ON COLUMN documents.updated_at IS 'When the row was last read from the document.';

ALTER TABLE documents ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON documents FROM PUBLIC, anon, authenticated, service_role;

GRANT SELECT ON documents TO authenticated, service_role;

------------------------------------------------------------------------------
-- 11. Trace ids
------------------------------------------------------------------------------

-- Trace ids: the trace of the request that created a task (X-Trace-ID, or
-- an id the API made), kept with the task so its events and its model
-- calls' log lines can name it. Set on insert, by the API or by an app's
-- own INSERT, or taken from the parent task, or left NULL; never changed
-- after.

ALTER TABLE ai_tasks ADD COLUMN trace_id text
    CONSTRAINT ai_tasks_trace_id_check CHECK (trace_id ~ '^[A-Za-z0-9._-]{1,64}$');

COMMENT ON COLUMN ai_tasks.trace_id IS 'The trace of the request that created the task (1-64 of A-Z a-z 0-9 . _ -), or NULL; set on insert, never changed.';

GRANT INSERT (trace_id) ON ai_tasks TO authenticated, service_role;

-- Rate-limit waits: how long a run waited for the provider's rate limit
-- (its pace, and the waits its refusals asked for), added with the run's
-- tokens and cost by the statements that already write them.
ALTER TABLE task_runs ADD COLUMN rate_limit_wait_ms bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN task_runs.rate_limit_wait_ms IS 'Milliseconds the run''s model calls waited for the provider''s rate limit.';

------------------------------------------------------------------------------
-- 12. Usage that outlives its runs
------------------------------------------------------------------------------

-- usage_rollup holds what deleted runs spent, grouped as the usage views
-- group: a run's row is added to it in the transaction that deletes the
-- run, by a trigger (sql/functions/usage.sql), and the views read rollup and live runs
-- together. A deleted run is in one or the other, never both.
CREATE TABLE usage_rollup (
    project_id uuid NOT NULL,
    day        date NOT NULL,
    usage_day  date NOT NULL,
    model      text NOT NULL,
    stopped    boolean NOT NULL,
    runs       bigint NOT NULL DEFAULT 0,
    tokens_in  bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    cost       numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, day, usage_day, model, stopped)
);

COMMENT ON TABLE usage_rollup IS 'What deleted runs spent, by project, day and model: added in the transaction that deletes them, read by the usage views with the live runs.';
COMMENT ON COLUMN usage_rollup.day IS 'UTC day of the run''s finish, else start, else creation (project_usage_daily''s day).';
COMMENT ON COLUMN usage_rollup.usage_day IS 'UTC day of the run''s finish, else creation (usage_daily''s day).';
COMMENT ON COLUMN usage_rollup.stopped IS 'The runs had stopped running (usage_daily counts only those).';

ALTER TABLE usage_rollup ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON usage_rollup FROM PUBLIC, anon, authenticated, service_role;

GRANT SELECT ON usage_rollup TO authenticated, service_role;

CREATE INDEX ai_tasks_finished_idx ON ai_tasks (coalesce(finished_at, updated_at))
    WHERE status IN ('succeeded', 'failed', 'blocked', 'cancelled');

------------------------------------------------------------------------------
-- 13. The events archive
------------------------------------------------------------------------------

-- The events archive: a finished task's timeline is written to object
-- storage as one gzip-compressed JSONL object (package archive) before its
-- agent_events rows are dropped. The task row says where, and through which
-- seq: readers take seq <= events_archived_seq from the object and the rest
-- from agent_events. The archiver writes the object first and marks the row
-- after, so a crash between the two leaves the mark as it was and a re-run
-- rewrites the same key.
ALTER TABLE ai_tasks
    ADD COLUMN events_archive_key  text,
    ADD COLUMN events_archived_seq integer NOT NULL DEFAULT 0,
    ADD COLUMN events_archived_at  timestamptz;

COMMENT ON COLUMN ai_tasks.events_archive_key IS 'Object key of the task''s archived timeline (gzip JSONL, one event a line in seq order), under ARCHIVE_PREFIX; NULL until archived. The worker''s.';
COMMENT ON COLUMN ai_tasks.events_archived_seq IS 'The last seq the archive holds: events up to it are read from the archive once their agent_events rows are gone. The worker''s.';
COMMENT ON COLUMN ai_tasks.events_archived_at IS 'When the archive was last written and marked. The worker''s.';

------------------------------------------------------------------------------
-- 14. A task's event id floor
------------------------------------------------------------------------------

-- A task's event id floor: every event of the task has an id above it, so
-- the task's reads plan only the days not sealed below it
-- (agentworker_event_floor(NULL, events_id_floor + 1)) instead of every
-- day. Set by the database on insert from the event id sequence: an
-- event's id is drawn (nextval, CACHE 1) when the event is inserted, after
-- the task row it names exists, so it is above the sequence's position
-- read at the task's insert. NULL: no bound, every day is read.

ALTER TABLE ai_tasks ADD COLUMN events_id_floor bigint;

COMMENT ON COLUMN ai_tasks.events_id_floor IS 'Every event of the task has an id above this (the event id sequence''s position when the task was inserted), or NULL: no bound. Set by the database on insert, whatever the inserter gave; never changed.';

------------------------------------------------------------------------------
-- 15. Sealed days
------------------------------------------------------------------------------

-- A read's floor (agentworker_event_floor) is no later than the default
-- partition's oldest row: found by this index, the partition being empty
-- but while the leader is away.
CREATE INDEX agent_events_default_created_idx ON agent_events_default (created_at);

-- The day partitions of agent_events, written with them (a read's floor
-- is looked up here, not in the catalog), and their seals: once sealed,
-- every row of the partition has an xid below xid_below and an id below
-- id_below, which its CHECK constraint <partition>_sealed enforces.
CREATE TABLE agent_event_days (
    partition text PRIMARY KEY,
    day       date NOT NULL UNIQUE,
    xid_below xid8,
    id_below  bigint,
    CHECK ((xid_below IS NULL) = (id_below IS NULL))
);

COMMENT ON TABLE agent_event_days IS 'The day partitions of agent_events and their seals: a sealed day''s rows all have an xid below xid_below and an id below id_below (the partition''s CHECK constraint <partition>_sealed), so a read after an xid, or of an id, skips it.';
COMMENT ON COLUMN agent_event_days.xid_below IS 'NULL until sealed; then the xmax of a snapshot taken under the partition''s exclusive lock once its day ended.';
COMMENT ON COLUMN agent_event_days.id_below IS 'NULL until sealed; then the id sequence''s next value, taken under the same lock.';

ALTER TABLE agent_event_days ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON agent_event_days FROM PUBLIC, anon, authenticated, service_role;

-- What a batch of deleted tasks takes with it is found by index: the
-- inbox items of each task and run (the foreign keys' cascades would scan
-- the table once a row), and the events of the batch, read from every
-- partition's (task_id, seq, created_at) index with the batch's ids as one
-- array (a join with the deleted rows scanned every partition whole).
CREATE INDEX inbox_items_task_idx ON inbox_items (task_id);
CREATE INDEX inbox_items_run_idx ON inbox_items (run_id) WHERE run_id IS NOT NULL;
