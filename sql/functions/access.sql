-- Access: who may see and call what. Row level security keys every table
-- apps read on the projects a caller's token names; every function of ours
-- is the owner's only, on this schema's search path, until a file grants it.

-- Makes functions internal: executable by the owner only, and on this
-- schema's search path (pg_temp last) whoever calls them. Every file of
-- sql/functions ends by calling it on the functions it defines: a replaced
-- function keeps its grants but loses its settings.
CREATE OR REPLACE FUNCTION agentworker_make_internal(VARIADIC p_functions regprocedure[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOREACH v_fn IN ARRAY p_functions LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;

-- The project ids the caller's token names: request.jwt.claims ->
-- 'projects', ids that are not uuids ignored. Policies call it as
-- (SELECT agentworker_jwt_projects())::uuid[]: a subquery, which Postgres
-- evaluates once per query, not once per row (the cast keeps "= ANY" from
-- reading it as a set of rows).
CREATE OR REPLACE FUNCTION agentworker_jwt_projects() RETURNS uuid[]
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
CREATE OR REPLACE FUNCTION agentworker_caller_may_access(p_project_id uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(c.caller, 'service_role', 'USAGE')
        OR pg_has_role(c.caller, (SELECT relowner FROM pg_class WHERE oid = 'ai_tasks'::regclass), 'USAGE')
        OR p_project_id = ANY (agentworker_jwt_projects())
    FROM (SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)::name AS caller) AS c
$$;

-- River's objects and agentworker_migrations: internal. A function, so
-- Migrate applies it again after River adds tables in a later version.
CREATE OR REPLACE FUNCTION agentworker_seal_internal() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    FOR v IN
        SELECT c.oid::regclass AS rel, c.relkind
        FROM pg_class c
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND (c.relname LIKE 'river\_%' OR c.relname IN ('agentworker_migrations', 'agentworker_function_files'))
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

DROP POLICY IF EXISTS ai_tasks_service ON ai_tasks;
CREATE POLICY ai_tasks_service ON ai_tasks TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS ai_tasks_read_own ON ai_tasks;
CREATE POLICY ai_tasks_read_own ON ai_tasks FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS ai_tasks_insert_own ON ai_tasks;
CREATE POLICY ai_tasks_insert_own ON ai_tasks FOR INSERT TO authenticated
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]) AND status = 'queued');

DROP POLICY IF EXISTS agent_events_service ON agent_events;
CREATE POLICY agent_events_service ON agent_events TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS agent_events_read_own ON agent_events;
CREATE POLICY agent_events_read_own ON agent_events FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS inbox_items_service ON inbox_items;
CREATE POLICY inbox_items_service ON inbox_items TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS inbox_items_read_own ON inbox_items;
CREATE POLICY inbox_items_read_own ON inbox_items FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS task_runs_service ON task_runs;
CREATE POLICY task_runs_service ON task_runs TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS task_runs_read_own ON task_runs;
CREATE POLICY task_runs_read_own ON task_runs FOR SELECT TO authenticated
    USING (task_id IN (SELECT id FROM ai_tasks WHERE project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[])));

DROP POLICY IF EXISTS agents_service ON agents;
CREATE POLICY agents_service ON agents TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS agents_own ON agents;
CREATE POLICY agents_own ON agents TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]))
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS task_dependencies_service ON task_dependencies;
CREATE POLICY task_dependencies_service ON task_dependencies TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS task_dependencies_read_own ON task_dependencies;
CREATE POLICY task_dependencies_read_own ON task_dependencies FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS task_dependencies_insert_own ON task_dependencies;
CREATE POLICY task_dependencies_insert_own ON task_dependencies FOR INSERT TO authenticated
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS audit_log_service_read ON audit_log;
CREATE POLICY audit_log_service_read ON audit_log FOR SELECT TO service_role USING (true);

DROP POLICY IF EXISTS task_comments_service ON task_comments;
CREATE POLICY task_comments_service ON task_comments TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS task_comments_read_own ON task_comments;
CREATE POLICY task_comments_read_own ON task_comments FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS documents_service ON documents;
CREATE POLICY documents_service ON documents TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS documents_read_own ON documents;
CREATE POLICY documents_read_own ON documents FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS usage_rollup_service ON usage_rollup;
CREATE POLICY usage_rollup_service ON usage_rollup TO service_role USING (true);

DROP POLICY IF EXISTS usage_rollup_read_own ON usage_rollup;
CREATE POLICY usage_rollup_read_own ON usage_rollup FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS project_settings_service ON project_settings;
CREATE POLICY project_settings_service ON project_settings TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS project_settings_own ON project_settings;
CREATE POLICY project_settings_own ON project_settings TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]))
    WITH CHECK (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS task_tree_rollup_service ON task_tree_rollup;
CREATE POLICY task_tree_rollup_service ON task_tree_rollup FOR SELECT TO service_role USING (true);

DROP POLICY IF EXISTS task_tree_rollup_read_own ON task_tree_rollup;
CREATE POLICY task_tree_rollup_read_own ON task_tree_rollup FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

DROP POLICY IF EXISTS project_day_spend_service ON project_day_spend;
CREATE POLICY project_day_spend_service ON project_day_spend FOR SELECT TO service_role USING (true);

DROP POLICY IF EXISTS project_day_spend_read_own ON project_day_spend;
CREATE POLICY project_day_spend_read_own ON project_day_spend FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_make_internal(regprocedure[])',
    'agentworker_jwt_projects()',
    'agentworker_caller_may_access(uuid)',
    'agentworker_seal_internal()']::regprocedure[]);
GRANT EXECUTE ON FUNCTION
    agentworker_jwt_projects()
TO authenticated, service_role;
