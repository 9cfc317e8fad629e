-- 008 tenant isolation: apps reach these tables through PostgREST, Supabase
-- Realtime or SQL, and each caller sees only the projects its token names.
-- The database enforces it, not only the gateway.
--
-- Roles, named as Supabase and PostgREST name them:
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
-- Internal tables (checkpoints, change sets, decisions, transitions, River's,
-- agentworker_migrations) are for the owner only. The owner of the tables
-- (the role that runs the migrations, which the worker connects as) is not
-- subject to row level security.
--
-- Plain Postgres: a role that does not exist is created NOLOGIN, as
-- PostgREST's docs do (creating roles needs CREATEROLE; without it, create
-- them first). Roles belong to the cluster: creation is idempotent and safe
-- when several databases migrate at once, and nothing here drops a role.
--
-- THE RULE FOR EVERY LATER MIGRATION. sql/isolation_test.go reads the
-- catalog and fails on any table, view, sequence or function of the schema
-- that breaks it (Supabase's default privileges grant everything a
-- migration creates in public to anon, authenticated and service_role):
--   * table: ALTER TABLE t ENABLE ROW LEVEL SECURITY;
--            REVOKE ALL ON t FROM PUBLIC, anon, authenticated, service_role;
--     That makes it internal. A table apps may read also gets its GRANTs
--     and policies keyed on agentworker_jwt_projects() like agent_events
--     below, and a line in the test's access table. A table made by an
--     earlier-numbered migration (applied before this one on a new
--     database) goes into v_api or v_internal below instead; its functions
--     named agentworker_* and its trigger functions are then covered by the
--     loops below.
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

CREATE OR REPLACE FUNCTION agentworker_cancel_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'cancel', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_pause_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'pause', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_resume_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'resume', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_retry_task(task_id uuid, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'retry', expected_version, actor) $$;

CREATE OR REPLACE FUNCTION agentworker_answer_input(task_id uuid, answer text, expected_version integer DEFAULT NULL, actor text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql SECURITY DEFINER
AS $$ SELECT agentworker_control_for_caller(task_id, 'answer', expected_version, actor, answer) $$;

-- Usage by project, for apps: usage_daily sums every project together, so
-- it stays with service_role. This view reads task_runs and ai_tasks with
-- the caller's rights (security_invoker), so their policies apply. Runs
-- still running count with what they spent so far.
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

DO $$
DECLARE
    -- Tables apps read (policies below); every other table is internal.
    v_api      text[] := ARRAY['ai_tasks', 'agent_events', 'task_runs', 'inbox_items'];
    v_internal text[] := ARRAY['task_checkpoints', 'change_sets', 'change_set_entries', 'build_decisions',
                               'agentworker_task_transitions', 'agentworker_run_transitions'];
    v_tables   regclass[];
    v_schema   text := current_schema();
    v          record;
BEGIN
    SELECT array_agg(format('%I.%I', v_schema, t)::regclass) INTO v_tables FROM unnest(v_api || v_internal) AS t;

    FOR v IN SELECT unnest(v_tables) AS rel LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v.rel);
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, anon, authenticated, service_role', v.rel);
    END LOOP;
    -- The usage views read task_runs and ai_tasks with the caller's rights.
    EXECUTE 'REVOKE ALL ON usage_daily, project_usage_daily FROM PUBLIC, anon, authenticated, service_role';

    -- Sequences of our tables (agent_events.id).
    FOR v IN
        SELECT d.objid::regclass AS seq
        FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
        WHERE d.classid = 'pg_class'::regclass AND d.refobjid = ANY (v_tables)
    LOOP
        EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM PUBLIC, anon, authenticated, service_role', v.seq);
    END LOOP;

    -- Trigger functions of our tables run as the owner, whoever writes the
    -- row: an app's insert into ai_tasks enqueues a River job it may not
    -- see; service_role's status update runs the state machine.
    FOR v IN
        SELECT DISTINCT t.tgfoid::regprocedure AS fn
        FROM pg_trigger t
        WHERE NOT t.tgisinternal AND t.tgrelid = ANY (v_tables)
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER', v.fn);
    END LOOP;

    -- Every function of ours: no PUBLIC execute, the pinned search_path.
    FOR v IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p
        WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = v_schema)
          AND (p.proname LIKE 'agentworker\_%'
               OR p.oid IN (SELECT t.tgfoid FROM pg_trigger t WHERE NOT t.tgisinternal AND t.tgrelid = ANY (v_tables)))
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

-- usage_daily: every project's usage together, for service_role only.
GRANT SELECT ON usage_daily TO service_role;

GRANT SELECT ON project_usage_daily TO authenticated, service_role;

GRANT EXECUTE ON FUNCTION
    agentworker_jwt_projects(),
    agentworker_cancel_task(uuid, integer, text),
    agentworker_pause_task(uuid, integer, text),
    agentworker_resume_task(uuid, integer, text),
    agentworker_retry_task(uuid, integer, text),
    agentworker_answer_input(uuid, text, integer, text)
TO authenticated, service_role;
