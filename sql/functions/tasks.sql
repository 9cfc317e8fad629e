-- The task and run rows: their state machines, the columns only the worker
-- moves, and what follows a move (inbox items, checkpoints dropped,
-- review, trace ids, staged contents dropped).

-- Every status change of a task, by any writer (the worker, a control
-- function, PostgREST, psql), must be a legal move, and a task starts queued
-- or paused. A status change bumps version when the writer did not. A move
-- into running starts a new holder (fence + 1); a task that stops running
-- loses its lease. A move from running back to queued is a hand-back only
-- the lease sweeper, the worker and the control functions make (they say so
-- with agentworker.requeue): any other writer would leave the holder running
-- while a new job starts a second run.
CREATE OR REPLACE FUNCTION ai_tasks_guard_status() RETURNS trigger
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

CREATE OR REPLACE TRIGGER ai_tasks_guard_insert BEFORE INSERT ON ai_tasks
    FOR EACH ROW EXECUTE FUNCTION ai_tasks_guard_status();

-- The WHEN clause of each status trigger is exactly the test its function
-- starts with, so an update that would do nothing calls nothing.
CREATE OR REPLACE TRIGGER ai_tasks_guard_status BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION ai_tasks_guard_status();

-- A run starts queued or running and moves only as its machine allows;
-- next_retry_at belongs to retry_scheduled alone.
CREATE OR REPLACE FUNCTION task_runs_guard_status() RETURNS trigger
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

CREATE OR REPLACE TRIGGER task_runs_guard_status BEFORE INSERT OR UPDATE OF status ON task_runs
    FOR EACH ROW EXECUTE FUNCTION task_runs_guard_status();

-- The machine's columns of ai_tasks are the worker's: the attempt and
-- retry counters (attempt, retries), the event seq counter (last_seq), the
-- lease and its holder (fence, lease_owner, lease_expires_at) and the job
-- of the current run (river_job_id), and the events archive's columns
-- (events_archive_key, events_archived_seq, events_archived_at: an app that
-- set them would hide a timeline or point a task at another project's
-- archive). An insert starts them at their
-- defaults; an update changes them only when the worker's statement says
-- it is the worker's (agentworker.machine, set by the claim and the lease
-- renewal), or is one of ours that moves one of them: an event write
-- taking its seqs (agentworker.seq), a trigger of ours (the event seq
-- trigger), a hand-back or a person's retry (agentworker.requeue moves
-- retries). Any other writer is refused: an INSERT with retries = -1000
-- would get a 1,005-try budget, last_seq = 41 would start the events at
-- 42, and a lease set by hand ten years ahead would never be swept; a
-- lease is only ever now() + TASK_LEASE, set by the worker.
CREATE OR REPLACE FUNCTION ai_tasks_guard_columns() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_machine boolean := coalesce(current_setting('agentworker.machine', true), '') = 'on';
    v_requeue boolean := coalesce(current_setting('agentworker.requeue', true), '') = 'on';
    v_column  text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_column := CASE
            WHEN NEW.attempt <> 0 THEN 'attempt'
            WHEN NEW.retries <> 0 THEN 'retries'
            WHEN NEW.last_seq <> 0 THEN 'last_seq'
            WHEN NEW.fence <> 0 THEN 'fence'
            WHEN NEW.river_job_id IS NOT NULL THEN 'river_job_id'
            WHEN NEW.lease_owner IS NOT NULL THEN 'lease_owner'
            WHEN NEW.lease_expires_at IS NOT NULL THEN 'lease_expires_at'
            WHEN NEW.events_archive_key IS NOT NULL THEN 'events_archive_key'
            WHEN NEW.events_archived_seq <> 0 THEN 'events_archived_seq'
            WHEN NEW.events_archived_at IS NOT NULL THEN 'events_archived_at'
        END;
        IF v_column IS NOT NULL THEN
            RAISE EXCEPTION 'ai_tasks.% is the worker''s: a task is inserted without it (task %)', v_column, NEW.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
        END IF;
        RETURN NEW;
    END IF;
    IF v_machine THEN
        RETURN NEW;
    END IF;
    v_column := CASE
        WHEN NEW.attempt IS DISTINCT FROM OLD.attempt THEN 'attempt'
        WHEN NEW.retries IS DISTINCT FROM OLD.retries AND NOT v_requeue THEN 'retries'
        WHEN NEW.last_seq IS DISTINCT FROM OLD.last_seq
             AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement' AND pg_trigger_depth() < 2 THEN 'last_seq'
        WHEN NEW.fence IS DISTINCT FROM OLD.fence THEN 'fence'
        WHEN NEW.river_job_id IS DISTINCT FROM OLD.river_job_id THEN 'river_job_id'
        WHEN NEW.lease_owner IS DISTINCT FROM OLD.lease_owner THEN 'lease_owner'
        WHEN NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN 'lease_expires_at'
        WHEN NEW.events_archive_key IS DISTINCT FROM OLD.events_archive_key THEN 'events_archive_key'
        WHEN NEW.events_archived_seq IS DISTINCT FROM OLD.events_archived_seq THEN 'events_archived_seq'
        WHEN NEW.events_archived_at IS DISTINCT FROM OLD.events_archived_at THEN 'events_archived_at'
    END;
    IF v_column IS NOT NULL THEN
        RAISE EXCEPTION 'ai_tasks.% is the worker''s: only the worker changes it (task %)', v_column, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_machine_columns';
    END IF;
    RETURN NEW;
END
$$;

-- Named to fire before ai_tasks_guard_insert and ai_tasks_guard_status
-- (triggers fire in name order), which set the lease and fence columns of
-- a status move themselves. The WHEN clauses keep the function from being
-- called by the writes that may make the change (a claim, a renewal, an
-- event batch, the seq trigger): it runs only where a refusal is possible.
CREATE OR REPLACE TRIGGER ai_tasks_guard_columns_insert BEFORE INSERT ON ai_tasks
    FOR EACH ROW WHEN (NEW.attempt <> 0 OR NEW.retries <> 0 OR NEW.last_seq <> 0 OR NEW.fence <> 0
        OR NEW.river_job_id IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_expires_at IS NOT NULL
        OR NEW.events_archive_key IS NOT NULL OR NEW.events_archived_seq <> 0 OR NEW.events_archived_at IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_guard_columns();

-- The guards of an update name the columns they watch (UPDATE OF): an
-- update that sets none of them (an event batch's last_seq aside, a
-- checkpoint, a finish) skips them before their WHEN clause, which
-- Postgres would otherwise parse again for every statement. A change can
-- only come from the update's SET list: no trigger that fires before these
-- (name order) sets the columns they watch.
CREATE OR REPLACE TRIGGER ai_tasks_guard_columns BEFORE UPDATE OF attempt, retries, fence, river_job_id, lease_owner,
    lease_expires_at, events_archive_key, events_archived_seq, events_archived_at, last_seq ON ai_tasks
    FOR EACH ROW WHEN (coalesce(current_setting('agentworker.machine', true), '') <> 'on'
        AND ((NEW.attempt, NEW.retries, NEW.fence, NEW.river_job_id, NEW.lease_owner, NEW.lease_expires_at,
              NEW.events_archive_key, NEW.events_archived_seq, NEW.events_archived_at)
                IS DISTINCT FROM (OLD.attempt, OLD.retries, OLD.fence, OLD.river_job_id, OLD.lease_owner, OLD.lease_expires_at,
                                  OLD.events_archive_key, OLD.events_archived_seq, OLD.events_archived_at)
            OR (NEW.last_seq IS DISTINCT FROM OLD.last_seq AND pg_trigger_depth() = 0
                AND coalesce(current_setting('agentworker.seq', true), '') <> 'statement')))
    EXECUTE FUNCTION ai_tasks_guard_columns();

-- A task's project, and an agent's, never change after insert, whoever
-- writes: a waiting dependent moved to another project kept its edge, and
-- that project's prompt got its dependency's result.
CREATE OR REPLACE FUNCTION agentworker_project_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'PROJECT_FIXED: %.project_id never changes after insert (row %, project %)', TG_TABLE_NAME, OLD.id, OLD.project_id
        USING ERRCODE = 'check_violation', CONSTRAINT = TG_TABLE_NAME || '_project_fixed';
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_project_fixed BEFORE UPDATE OF project_id ON ai_tasks
    FOR EACH ROW WHEN (NEW.project_id IS DISTINCT FROM OLD.project_id)
    EXECUTE FUNCTION agentworker_project_fixed();

CREATE OR REPLACE TRIGGER agents_project_fixed BEFORE UPDATE OF project_id ON agents
    FOR EACH ROW WHEN (NEW.project_id IS DISTINCT FROM OLD.project_id)
    EXECUTE FUNCTION agentworker_project_fixed();

-- A task that succeeded leaves a task_completed inbox item, whoever finished it.
CREATE OR REPLACE FUNCTION ai_tasks_inbox_completed() RETURNS trigger
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

CREATE OR REPLACE TRIGGER ai_tasks_inbox_completed AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status = 'succeeded' AND OLD.status <> 'succeeded')
    EXECUTE FUNCTION ai_tasks_inbox_completed();

-- A pause request lives while the task may still run: any other status
-- clears it.
CREATE OR REPLACE FUNCTION ai_tasks_clear_pause() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('running', 'queued') THEN
        NEW.pause_requested := false;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_clear_pause BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('running', 'queued'))
    EXECUTE FUNCTION ai_tasks_clear_pause();

-- A task that ended (succeeded, failed, blocked, cancelled) has nothing to
-- continue: its checkpoint goes, and a change set still open (a paused task
-- cancelled, say) is discarded. A retry starts over.
CREATE OR REPLACE FUNCTION ai_tasks_drop_checkpoint() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status THEN
        DELETE FROM task_checkpoints WHERE task_id = NEW.id;
        UPDATE change_sets SET status = 'discarded', updated_at = now() WHERE task_id = NEW.id AND status = 'open';
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_drop_checkpoint AFTER UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'blocked', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION ai_tasks_drop_checkpoint();

-- An approval is for the one apply that follows it: a task that stops
-- otherwise (fails, is cancelled, pauses, enters review again) drops it, so
-- a later retry builds again. A task entering review tells a person.
CREATE OR REPLACE FUNCTION ai_tasks_enter_review() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    NEW.approved := false;
    IF NEW.status = 'review' THEN
        INSERT INTO inbox_items (project_id, task_id, kind, reason, title, content)
        VALUES (NEW.project_id, NEW.id, 'review_requested', 'review',
                NEW.type || ' task waits for review',
                coalesce(NEW.error ->> 'message', NEW.result ->> 'summary', ''));
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_enter_review BEFORE UPDATE OF status ON ai_tasks
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status NOT IN ('queued', 'running'))
    EXECUTE FUNCTION ai_tasks_enter_review();

CREATE OR REPLACE FUNCTION ai_tasks_guard_trace_id() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RAISE EXCEPTION 'ai_tasks.trace_id and trace_parent are set when a task is inserted and never changed (task %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ai_tasks_trace_id_immutable';
END
$$;

-- Every writer, the worker included: a trace id and the span it joins name
-- where a task came from, which nothing later changes.
CREATE OR REPLACE TRIGGER ai_tasks_guard_trace_id BEFORE UPDATE OF trace_id, trace_parent ON ai_tasks
    FOR EACH ROW WHEN (NEW.trace_id IS DISTINCT FROM OLD.trace_id OR NEW.trace_parent IS DISTINCT FROM OLD.trace_parent)
    EXECUTE FUNCTION ai_tasks_guard_trace_id();

-- A child inserted without a trace (a plan's steps, a subtask) takes its
-- parent's: the work one request started keeps one trace.
CREATE OR REPLACE FUNCTION ai_tasks_inherit_trace_id() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT p.trace_id INTO NEW.trace_id FROM ai_tasks p WHERE p.id = NEW.parent_task_id;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER ai_tasks_inherit_trace_id BEFORE INSERT ON ai_tasks
    FOR EACH ROW WHEN (NEW.trace_id IS NULL AND NEW.parent_task_id IS NOT NULL)
    EXECUTE FUNCTION ai_tasks_inherit_trace_id();

-- A finished change set keeps only what the console's diff shows: an
-- applied set its entries' contents and priors (after and before), without
-- the checkpoint's view (cp_*), which only a resumed attempt of an open set
-- reads; a discarded set keeps nothing (FinishChangeSet already drops the
-- entries when the worker discards; this covers a set discarded by a task
-- that ended while paused, and any other writer).
CREATE OR REPLACE FUNCTION change_sets_drop_staged() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.status = 'discarded' THEN
        DELETE FROM change_set_entries WHERE task_id = NEW.task_id;
    ELSE
        UPDATE change_set_entries SET cp = false, cp_op = NULL, cp_content = NULL, cp_from_path = NULL
        WHERE task_id = NEW.task_id AND (cp OR cp_content IS NOT NULL);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER change_sets_drop_staged AFTER UPDATE OF status ON change_sets
    FOR EACH ROW WHEN (NEW.status IN ('applied', 'discarded') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION change_sets_drop_staged();

-- Settings: the functions above are the owner's only, on this schema's
-- search path, until granted here.
SELECT agentworker_make_internal(VARIADIC ARRAY[
    'ai_tasks_guard_status()',
    'task_runs_guard_status()',
    'ai_tasks_guard_columns()',
    'agentworker_project_fixed()',
    'ai_tasks_inbox_completed()',
    'ai_tasks_clear_pause()',
    'ai_tasks_drop_checkpoint()',
    'ai_tasks_enter_review()',
    'ai_tasks_guard_trace_id()',
    'ai_tasks_inherit_trace_id()',
    'change_sets_drop_staged()']::regprocedure[]);
