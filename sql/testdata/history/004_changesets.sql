-- change_sets: one per build task. A build's writes are staged here and
-- reach the project's files only when the build succeeds; on failure, block
-- or cancel the set is discarded and the project is left as it was.
--   open      the agent is still working; entries may change
--   applying  the build succeeded; entries are being written to storage.
--             A crash here is finished by the next attempt (idempotent).
--   applied   every entry is in storage; the task is succeeded
--   discarded the build failed, was blocked or cancelled
CREATE TABLE change_sets (
    task_id    uuid PRIMARY KEY REFERENCES ai_tasks (id) ON DELETE CASCADE,
    project_id uuid NOT NULL,
    status     text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'applying', 'applied', 'discarded')),
    -- result is the task result to write once the set is applied.
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- change_set_entries: the pending state of one path. A move is a write of
-- the target (from_path set) plus a delete of the source.
CREATE TABLE change_set_entries (
    task_id    uuid NOT NULL REFERENCES change_sets (task_id) ON DELETE CASCADE,
    path       text NOT NULL,
    op         text NOT NULL CHECK (op IN ('write', 'delete')),
    content    bytea CHECK ((op = 'write') = (content IS NOT NULL)),
    from_path  text,
    -- base_etag is the version of the file the change was made against:
    -- '' when the file did not exist. Applying refuses a file someone
    -- else changed meanwhile.
    base_etag  text NOT NULL DEFAULT '',
    -- ord orders entries by first change, so they are applied in the order
    -- the agent made them.
    ord        integer NOT NULL,
    applied    boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, path)
);

-- build_decisions: the steps of a plan-driven build, by decision id, so a
-- repeated decision is executed once.
CREATE TABLE build_decisions (
    task_id     uuid NOT NULL REFERENCES ai_tasks (id) ON DELETE CASCADE,
    decision_id text NOT NULL,
    status      text NOT NULL CHECK (status IN ('accepted', 'rejected')),
    outcome     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, decision_id)
);
