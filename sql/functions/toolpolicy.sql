-- Tool policies: the check of an agent's tool_policy and of a task's
-- input.tool_policy on every write, and the approvals of the calls that
-- asked (the answers are control actions, control.sql).

-- agentworker_check_tool_policy raises check_violation, naming the rule
-- and what is wrong, for a policy that is not an ordered list of rules
-- {tool, match, action, reason}: tool a tool of the service or "*",
-- action allow, ask or deny, match (a path glob for the file tools, a
-- command for run_command) only where a call has something to match,
-- bounded sizes. The worker's Go check (tools.ParseCallPolicy) is the same.
CREATE OR REPLACE FUNCTION agentworker_check_tool_policy(p_policy jsonb, p_where text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- finish and request_input steer the loop: always allowed, never named.
    v_tools constant text[] := ARRAY['apply_patch', 'delete_file', 'edit_file', 'generate_image',
        'get_project_structure', 'list_files', 'move_file', 'read_file', 'run_command',
        'search_files', 'write_file'];
    v_path_tools constant text[] := ARRAY['list_files', 'read_file', 'search_files', 'get_project_structure',
        'write_file', 'edit_file', 'apply_patch', 'delete_file', 'move_file', 'generate_image'];
    v_rule  jsonb;
    v_i     integer := 0;
    v_key   text;
    v_tool  text;
    v_match text;
BEGIN
    IF p_policy IS NULL OR jsonb_typeof(p_policy) = 'null' THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_policy) <> 'array' THEN
        RAISE EXCEPTION '%: must be a list of {"tool", "match", "action", "reason"}', p_where
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
    END IF;
    IF jsonb_array_length(p_policy) > 100 THEN
        RAISE EXCEPTION '%: % rules; at most 100', p_where, jsonb_array_length(p_policy)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
    END IF;
    FOR v_rule IN SELECT value FROM jsonb_array_elements(p_policy) LOOP
        IF jsonb_typeof(v_rule) <> 'object' THEN
            RAISE EXCEPTION '%[%]: a rule is an object {"tool", "match", "action", "reason"}', p_where, v_i
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
        END IF;
        FOR v_key IN SELECT jsonb_object_keys(v_rule) LOOP
            IF v_key NOT IN ('tool', 'match', 'action', 'reason') THEN
                RAISE EXCEPTION '%[%]: unknown field %', p_where, v_i, v_key
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
            END IF;
            IF jsonb_typeof(v_rule -> v_key) <> 'string' THEN
                RAISE EXCEPTION '%[%]: % must be a string', p_where, v_i, v_key
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
            END IF;
        END LOOP;
        v_tool := coalesce(v_rule ->> 'tool', '');
        v_match := coalesce(v_rule ->> 'match', '');
        IF v_tool <> '*' AND NOT v_tool = ANY (v_tools) THEN
            RAISE EXCEPTION '%[%]: tool % is not a tool; use "*" or one of %', p_where, v_i, to_jsonb(v_tool),
                array_to_string(v_tools, ', ')
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
        END IF;
        IF coalesce(v_rule ->> 'action', '') NOT IN ('allow', 'ask', 'deny') THEN
            RAISE EXCEPTION '%[%]: action % : want allow, ask or deny', p_where, v_i, to_jsonb(coalesce(v_rule ->> 'action', ''))
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
        END IF;
        IF length(coalesce(v_rule ->> 'reason', '')) > 500 THEN
            RAISE EXCEPTION '%[%]: reason is longer than 500', p_where, v_i
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
        END IF;
        IF v_match <> '' THEN
            IF length(v_match) > 300 THEN
                RAISE EXCEPTION '%[%]: match is longer than 300', p_where, v_i
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
            END IF;
            IF v_tool <> '*' AND v_tool <> 'run_command' AND NOT v_tool = ANY (v_path_tools) THEN
                RAISE EXCEPTION '%[%]: tool % takes no match: a match is a path glob for the file tools and a command for run_command',
                    p_where, v_i, v_tool
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
            END IF;
            -- The malformed globs: a class never closed or empty, a
            -- trailing escape.
            IF v_match ~ '\[[^]]*$' OR v_match ~ '\[\^?\]' OR v_match ~ '\\$' THEN
                RAISE EXCEPTION '%[%]: match % is not a valid pattern', p_where, v_i, to_jsonb(v_match)
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'tool_policy_valid';
            END IF;
        END IF;
        v_i := v_i + 1;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION agents_check_tool_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_check_tool_policy(NEW.tool_policy, 'tool_policy');
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER agents_check_tool_policy BEFORE INSERT OR UPDATE OF tool_policy ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_check_tool_policy();

CREATE OR REPLACE FUNCTION ai_tasks_check_tool_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM agentworker_check_tool_policy(NEW.input -> 'tool_policy', 'input.tool_policy');
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_check_tool_policy BEFORE INSERT OR UPDATE OF input ON ai_tasks
    FOR EACH ROW WHEN (NEW.input ? 'tool_policy')
    EXECUTE FUNCTION ai_tasks_check_tool_policy();

-- A retry starts a new conversation, whose call ids may repeat the old
-- ones: the old conversation's approvals go. Until then they stay, the
-- record of what was asked, answered and run.
CREATE OR REPLACE FUNCTION ai_tasks_drop_tool_approvals() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM tool_approvals WHERE task_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_drop_tool_approvals AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status IN ('failed', 'blocked', 'cancelled'))
    EXECUTE FUNCTION ai_tasks_drop_tool_approvals();

DROP POLICY IF EXISTS tool_approvals_service ON tool_approvals;
CREATE POLICY tool_approvals_service ON tool_approvals TO service_role USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS tool_approvals_read_own ON tool_approvals;
CREATE POLICY tool_approvals_read_own ON tool_approvals FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));

SELECT agentworker_make_internal(VARIADIC ARRAY[
    'agentworker_check_tool_policy(jsonb, text)',
    'agents_check_tool_policy()',
    'ai_tasks_check_tool_policy()',
    'ai_tasks_drop_tool_approvals()']::regprocedure[]);
