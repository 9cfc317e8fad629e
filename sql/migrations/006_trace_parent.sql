-- The span of the request that created a task, so that each attempt's
-- invoke_agent span joins that request's trace as its child, on whichever
-- replica runs it.

ALTER TABLE ai_tasks ADD COLUMN trace_parent text
    CONSTRAINT ai_tasks_trace_parent_check CHECK (trace_parent ~ '^[0-9a-f]{16}$' AND trace_parent <> '0000000000000000');

COMMENT ON COLUMN ai_tasks.trace_parent IS 'The W3C span id (16 lowercase hex) of the request that created the task, within trace_id''s trace, or NULL; set on insert.';

GRANT INSERT (trace_parent) ON ai_tasks TO authenticated, service_role;
