-- Realtime: what frontends need to follow agent_events. Idempotent, so it
-- can be re-applied after a supabase_realtime publication is created.

-- xid is the id of the transaction that wrote the event. A bigserial id can
-- become visible out of order across transactions (id 10 commits before id
-- 9), so a project-wide reader cannot use id alone as its cursor. It orders
-- by (xid, id) and reads only events whose xid is below the xmin of its
-- snapshot: every transaction with a smaller xid has then finished, so no
-- event can later appear before its cursor (sql.ProjectEventsAfter).
ALTER TABLE agent_events ADD COLUMN IF NOT EXISTS xid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE INDEX IF NOT EXISTS agent_events_project_xid_idx ON agent_events (project_id, xid, id);

-- Supabase: where the supabase_realtime publication exists, publish
-- agent_events with full row images (REPLICA IDENTITY FULL), so a
-- supabase-js postgres_changes subscriber works unchanged. Elsewhere, skip.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'supabase_realtime') THEN
        ALTER TABLE agent_events REPLICA IDENTITY FULL;
        IF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                       WHERE pubname = 'supabase_realtime'
                         AND schemaname = current_schema()
                         AND tablename = 'agent_events') THEN
            EXECUTE format('ALTER PUBLICATION supabase_realtime ADD TABLE %I.agent_events', current_schema());
        END IF;
    END IF;
END
$$;
