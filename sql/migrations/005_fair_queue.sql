-- Projects take turns in the task queue. River takes a queue's available
-- jobs by priority, then scheduled_at, then id; the pickup functions give
-- each project's next job the scheduled_at just after the project's last
-- job still waiting at its priority (agentworker_queue_turn), so a long
-- backlog of one project no longer holds every other project's next task
-- behind it. A task's job carries its project in its args, and this index
-- finds a project's last waiting job of a priority.
CREATE INDEX river_job_ai_task_project_idx ON river_job ((args ->> 'project_id'), priority, scheduled_at)
    WHERE state = 'available' AND kind = 'ai_task';

-- The jobs not yet finished carry their project too.
UPDATE river_job j SET args = j.args || jsonb_build_object('project_id', t.project_id)
FROM ai_tasks t
WHERE j.kind = 'ai_task' AND j.finalized_at IS NULL AND j.args ->> 'task_id' = t.id::text;
