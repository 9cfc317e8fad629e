-- A plan becomes a graph: the tasks a plan planned are created as its
-- children, with their dependencies, by the database.

-- The tasks a plan planned become its children, with their dependencies, in
-- the transaction that records the plan's success: under the holder's fence
-- (a stale holder's call raises, and its transaction creates nothing), and
-- once (a plan that has its children already gets no second set).
-- p_tasks: [{"key", "title", "prompt", "type", "agent_id", "priority",
-- "depends_on": [key]}], keys unique, dependencies among them acyclic (the
-- dependency trigger refuses a cycle anyway). Returns the children made.
CREATE FUNCTION agentworker_expand_plan(p_parent uuid, p_fence bigint, p_tasks jsonb) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_parent ai_tasks;
    v_ids    jsonb := '{}';
    v        record;
    v_id     uuid;
    v_dep    text;
    v_n      integer := 0;
BEGIN
    SELECT * INTO v_parent FROM ai_tasks WHERE id = p_parent AND fence = p_fence AND status = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'expand the plan of task %: it is no longer held under fence %', p_parent, p_fence
            USING ERRCODE = 'AWFEN';
    END IF;
    IF EXISTS (SELECT 1 FROM ai_tasks WHERE parent_task_id = p_parent AND input ? 'planned_task') THEN
        RETURN 0;
    END IF;
    FOR v IN SELECT * FROM jsonb_to_recordset(p_tasks) AS x(key text, title text, prompt text, type text, agent_id uuid, priority integer)
    LOOP
        INSERT INTO ai_tasks (project_id, type, prompt, input, priority, agent_id, parent_task_id)
        VALUES (v_parent.project_id, v.type, v.prompt,
                jsonb_build_object('planned_task', jsonb_build_object('plan_task_id', p_parent, 'key', v.key, 'title', v.title)),
                coalesce(v.priority, 2), v.agent_id, p_parent)
        RETURNING id INTO v_id;
        v_ids := v_ids || jsonb_build_object(v.key, v_id);
        v_n := v_n + 1;
    END LOOP;
    FOR v IN SELECT * FROM jsonb_to_recordset(p_tasks) AS x(key text, depends_on text[])
    LOOP
        FOREACH v_dep IN ARRAY coalesce(v.depends_on, '{}') LOOP
            IF NOT v_ids ? v_dep THEN
                RAISE EXCEPTION 'INVALID_TASK_DEPENDENCY: planned task % depends on %, which the plan does not have', v.key, v_dep
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'task_dependencies_rule';
            END IF;
            INSERT INTO task_dependencies (task_id, depends_on_task_id)
            VALUES ((v_ids ->> v.key)::uuid, (v_ids ->> v_dep)::uuid);
        END LOOP;
    END LOOP;
    RETURN v_n;
END
$$;

DO $$
BEGIN
    -- Internal, as every function of ours: the worker calls it as owner.
    REVOKE ALL ON FUNCTION agentworker_expand_plan(uuid, bigint, jsonb) FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agentworker_expand_plan(uuid, bigint, jsonb) SET search_path = %I, pg_temp', current_schema());
END
$$;
