-- 102 exactly once: the idle check holds the task row like every other
-- writer of a task's events, so nothing follows the terminal event.

-- agentworker_flag_idle, as in 003, except: each candidate task's row is
-- locked (skipped when a holder is writing to it: a task that writes is not
-- idle) and checked again under the lock, still running the same attempt,
-- before the alert event and the inbox item are written. A task finishing
-- meanwhile has committed its terminal event and left running by then, or
-- waits for the alert to commit first.
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
