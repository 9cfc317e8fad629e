-- A holder's event write takes its seqs in its own statement: one update
-- of the task row, which is also the fence check and the row lock, gives a
-- batch of n events the seqs last_seq+1 … last_seq+n, where the per-row
-- trigger updated the task row once per event (a two-call build writes 33
-- events: 33 row versions of ai_tasks, 33 trigger calls). The statement
-- marks itself with agentworker.seq = 'statement'; the row trigger then
-- leaves the seqs it was given alone. Every other writer (psql, PostgREST,
-- the control functions) is unchanged: its rows come without the mark or
-- without a seq, and the trigger assigns them under the same row lock, so
-- seq order is still commit order for a task, whoever writes.
DROP TRIGGER agent_events_assign_seq ON agent_events;
CREATE TRIGGER agent_events_assign_seq BEFORE INSERT ON agent_events
    FOR EACH ROW
    WHEN (NEW.seq IS NULL OR current_setting('agentworker.seq', true) IS DISTINCT FROM 'statement')
    EXECUTE FUNCTION agent_events_assign_seq();

-- The statement-level trigger clears the mark, so it never outlives the
-- statement that set it; the rest is 007's.
CREATE OR REPLACE FUNCTION agent_events_announce() RETURNS trigger
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

DO $$
BEGIN
    REVOKE ALL ON FUNCTION agent_events_announce() FROM PUBLIC, anon, authenticated, service_role;
    EXECUTE format('ALTER FUNCTION agent_events_announce() SET search_path = %I, pg_temp', current_schema());
END
$$;
