-- An app writes an agent's own fields: its id, version and times are the
-- database's, and its project is set once, at insert (the same column
-- rules as ai_tasks). An authenticated bearer could set version and
-- created_at to anything.
REVOKE INSERT, UPDATE ON agents FROM authenticated;
GRANT INSERT (project_id, name, role, model, persona, tools, status, review) ON agents TO authenticated;
GRANT UPDATE (name, role, model, persona, tools, status, review) ON agents TO authenticated;
