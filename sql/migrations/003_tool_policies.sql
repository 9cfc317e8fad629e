-- Tool policies: an agent's (and, narrowing it, a task's input.tool_policy)
-- ordered rules {tool, match, action allow | ask | deny, reason}. A call
-- that asks is not run: the task waits in awaiting_approval, holding no
-- lease, until a person approves or denies every call that asked.

ALTER TABLE agents ADD COLUMN tool_policy jsonb NOT NULL DEFAULT '[]';

COMMENT ON COLUMN agents.tool_policy IS 'Ordered rules {tool, match, action allow|ask|deny, reason} deciding each tool call of its tasks; the first rule that matches decides, no match allows. Checked on write.';

GRANT INSERT (tool_policy) ON agents TO authenticated;
GRANT UPDATE (tool_policy) ON agents TO authenticated;

-- awaiting_approval: a call of the last model turn asked, and waits for a
-- person; the task holds no lease and has no job.
ALTER TABLE ai_tasks DROP CONSTRAINT ai_tasks_status_check;
ALTER TABLE ai_tasks ADD CONSTRAINT ai_tasks_status_check CHECK (status IN (
    'queued', 'running', 'succeeded', 'failed', 'blocked',
    'cancelled', 'paused', 'awaiting_input', 'waiting', 'review', 'awaiting_approval'));

INSERT INTO agentworker_task_transitions (from_status, to_status) VALUES
    ('running', 'awaiting_approval'),
    ('awaiting_approval', 'queued'),     -- the last call that asked was answered
    ('awaiting_approval', 'cancelled');

ALTER TABLE agent_events DROP CONSTRAINT agent_events_type_check;
ALTER TABLE agent_events ADD CONSTRAINT agent_events_type_check CHECK (type IN (
    'agent_phase', 'tool_call', 'file_update', 'self_repair',
    'log', 'error', 'progress', 'tool_approval_requested', 'tool_approval_answered'));

-- tool_approvals: one row per call that asked, keyed by its task and the
-- model's tool_call_id. An approved call's output is kept once it ran, so
-- that a later attempt gives the model that output instead of running the
-- call again.
CREATE TABLE tool_approvals (
    task_id      uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    tool_call_id text NOT NULL CHECK (tool_call_id <> '' AND length(tool_call_id) <= 200),
    project_id   uuid NOT NULL,
    run_id       uuid REFERENCES task_runs (id) ON DELETE SET NULL,
    tool_name    text NOT NULL,
    arguments    text NOT NULL,
    reason       text NOT NULL DEFAULT '',
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied')),
    message      text,
    resolver     text,
    output       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    answered_at  timestamptz,
    ran_at       timestamptz,
    PRIMARY KEY (task_id, tool_call_id),
    CHECK (status = 'pending' OR answered_at IS NOT NULL),
    CHECK (output IS NULL OR status = 'approved')
);

CREATE INDEX tool_approvals_pending_idx ON tool_approvals (project_id, created_at) WHERE status = 'pending';

COMMENT ON TABLE tool_approvals IS 'A tool call a policy made ask: its arguments, the answer (approved, denied with a message for the model) and, once an approved call ran, its output.';
COMMENT ON COLUMN tool_approvals.output IS 'What the approved call returned, kept when it ran: it is never run again.';

ALTER TABLE tool_approvals ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON tool_approvals FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON tool_approvals TO authenticated, service_role;
