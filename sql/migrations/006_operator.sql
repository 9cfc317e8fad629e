-- Operating many tasks at once: one control action over a project's tasks,
-- and the project's log events read from an index.

------------------------------------------------------------------------------
-- Bulk control
------------------------------------------------------------------------------

-- agentworker_broadcast applies one control action (pause, resume, cancel or
-- retry) to a project's tasks, each through agentworker_control_task: the
-- same state machine, version check, audit event and fencing as alone. It
-- targets the tasks in p_statuses, or those of p_task_ids (a given id not in
-- the project is answered not_found), or both; with neither, the project's
-- running tasks. A call takes at most p_limit tasks, in id order after
-- p_after, and returns one control result per task: a caller pages on with
-- p_after = the last task_id while a call returned p_limit rows. Each call
-- is its own transaction, so no call holds a lock on more than p_limit
-- tasks. A task whose row another transaction holds (its worker finishing
-- it, say) is not waited for: it is answered conflict, and is unchanged.
CREATE FUNCTION agentworker_broadcast(
    p_command text, p_project_id uuid, p_statuses text[] DEFAULT NULL, p_task_ids uuid[] DEFAULT NULL,
    p_expected_versions jsonb DEFAULT NULL, p_actor text DEFAULT NULL,
    p_after uuid DEFAULT NULL, p_limit integer DEFAULT 500)
RETURNS SETOF jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id    uuid;
    v_found boolean;
BEGIN
    IF p_command IS NULL OR p_command NOT IN ('pause', 'resume', 'cancel', 'retry') THEN
        RAISE EXCEPTION 'unknown broadcast command %: want pause, resume, cancel or retry', coalesce(p_command, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 5000 THEN
        RAISE EXCEPTION 'broadcast limit % out of range 1..5000', p_limit USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_id, v_found IN
        SELECT t.id, true FROM ai_tasks t
        WHERE t.project_id = p_project_id
          AND (p_task_ids IS NULL OR t.id = ANY (p_task_ids))
          AND (t.status = ANY (p_statuses) OR (p_statuses IS NULL AND p_task_ids IS NOT NULL)
               OR (p_statuses IS NULL AND p_task_ids IS NULL AND t.status = 'running'))
          AND (p_after IS NULL OR t.id > p_after)
        UNION ALL
        SELECT g.id, false FROM unnest(p_task_ids) AS g(id)
        WHERE (p_after IS NULL OR g.id > p_after)
          AND NOT EXISTS (SELECT 1 FROM ai_tasks t WHERE t.id = g.id AND t.project_id = p_project_id)
        ORDER BY 1
        LIMIT p_limit
    LOOP
        IF NOT v_found THEN
            RETURN NEXT jsonb_build_object('outcome', 'not_found', 'task_id', v_id, 'action', p_command,
                'error', format('task %s not found', v_id));
            CONTINUE;
        END IF;
        BEGIN
            PERFORM 1 FROM ai_tasks WHERE id = v_id FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            RETURN NEXT jsonb_build_object('outcome', 'conflict', 'task_id', v_id, 'action', p_command,
                'error', format('task %s is being changed by another transaction: try again', v_id));
            CONTINUE;
        END;
        RETURN NEXT agentworker_control_task(v_id, p_command,
            (p_expected_versions ->> v_id::text)::integer, p_actor);
    END LOOP;
END
$$;

-- The broadcast apps call through PostgREST (POST /rpc/agentworker_broadcast_tasks),
-- checked against the caller: on a project the caller may not see, every
-- given id is answered not_found and nothing else is, as for a project
-- without such tasks.
CREATE FUNCTION agentworker_broadcast_tasks(
    command text, project_id uuid, statuses text[] DEFAULT NULL, task_ids uuid[] DEFAULT NULL,
    expected_versions jsonb DEFAULT NULL, actor text DEFAULT NULL,
    after uuid DEFAULT NULL, "limit" integer DEFAULT 500)
RETURNS SETOF jsonb
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT agentworker_caller_may_access(project_id) THEN
        RETURN QUERY SELECT jsonb_build_object('outcome', 'not_found', 'task_id', g.id, 'action', command,
                'error', format('task %s not found', g.id))
            FROM unnest(task_ids) AS g(id)
            WHERE after IS NULL OR g.id > after
            ORDER BY g.id
            LIMIT "limit";
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM agentworker_broadcast(command, project_id, statuses, task_ids,
        expected_versions, actor, after, "limit");
END
$$;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'agentworker_broadcast(text, uuid, text[], uuid[], jsonb, text, uuid, integer)',
        'agentworker_broadcast_tasks(text, uuid, text[], uuid[], jsonb, text, uuid, integer)']::regprocedure[]
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, anon, authenticated, service_role', v_fn);
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_fn, current_schema());
    END LOOP;
END
$$;

GRANT EXECUTE ON FUNCTION agentworker_broadcast_tasks(text, uuid, text[], uuid[], jsonb, text, uuid, integer)
TO authenticated, service_role;

------------------------------------------------------------------------------
-- The logs query
------------------------------------------------------------------------------

-- A project's log events newest first (GET /v1/projects/{id}/logs): read
-- from here, not from a scan of every event of the project. IF NOT EXISTS:
-- on a large table an operator builds it CONCURRENTLY before migrating.
CREATE INDEX IF NOT EXISTS agent_events_log_idx ON agent_events (project_id, id) WHERE type = 'log';

------------------------------------------------------------------------------
-- Refusals audited
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
CREATE POLICY audit_log_service_read ON audit_log FOR SELECT TO service_role USING (true);

COMMENT ON TABLE audit_log IS 'Refused API requests, at most AuditPerActorPerMinute rows per actor a minute; service_role reads it.';
COMMENT ON COLUMN audit_log.actor IS 'user:<sub> or role:<role> of a valid token; anonymous without one.';
COMMENT ON COLUMN audit_log.action IS 'The route: METHOD and path pattern.';
COMMENT ON COLUMN audit_log.resource IS 'The request path.';
COMMENT ON COLUMN audit_log.reason IS 'Why it was refused: the error code and message (redacted).';
COMMENT ON COLUMN audit_log.suppressed IS 'Refusals of this actor left out since its previous row (over its allowance).';
