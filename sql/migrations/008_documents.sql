-- An agent may ask for review: a build it runs ends in review as one whose
-- input says review = true does. And the project's documents: its Markdown
-- under docs/ and its rules files, indexed by their front matter so that a
-- task's context inlines the mandatory ones and lists the others.

ALTER TABLE agents ADD COLUMN review boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN agents.review IS 'A build task run by this agent that finishes cleanly ends in review, as one with input.review = true does.';

-- documents: one row per Markdown document of a project's files, as its
-- storage listing last showed it (etag) and its front matter says. The
-- worker keeps it: when a task builds its context, after a build applied
-- changes to documents, and on POST /v1/projects/{id}/docs/index. Front
-- matter is the project's text, hostile input: a malformed or oversized
-- one is ignored (problem says why) and the document is still listed.
CREATE TABLE documents (
    project_id uuid NOT NULL,
    path       text NOT NULL CHECK (path <> '' AND length(path) <= 1024),
    title      text NOT NULL DEFAULT '' CHECK (length(title) <= 200),
    doc_type   text NOT NULL DEFAULT '' CHECK (length(doc_type) <= 50),
    mandatory  boolean NOT NULL DEFAULT false,
    tags       text[] NOT NULL DEFAULT '{}' CHECK (cardinality(tags) <= 20),
    etag       text NOT NULL,
    problem    text CHECK (length(problem) <= 500),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, path)
);

COMMENT ON TABLE documents IS 'A project''s Markdown documents (docs/**/*.md and its rules files) with their front matter; kept current from the storage listing''s etags.';
COMMENT ON COLUMN documents.path IS 'The document''s path in the project''s files.';
COMMENT ON COLUMN documents.title IS 'Front matter title, else the first heading, else the file name.';
COMMENT ON COLUMN documents.doc_type IS 'Front matter type (free text, e.g. rules, guide, adr); rules for a rules file without one.';
COMMENT ON COLUMN documents.mandatory IS 'Front matter mandatory: true: the document''s text is in every task''s prompt (within the context budget); else it is listed by path and title.';
COMMENT ON COLUMN documents.tags IS 'Front matter tags.';
COMMENT ON COLUMN documents.etag IS 'The storage etag the row was read at: a listing with another etag re-reads the document.';
COMMENT ON COLUMN documents.problem IS 'Why the front matter was ignored (malformed, too large), if it was.';
COMMENT ON COLUMN documents.updated_at IS 'When the row was last read from the document.';

ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON documents FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON documents TO authenticated, service_role;
CREATE POLICY documents_service ON documents TO service_role USING (true) WITH CHECK (true);
CREATE POLICY documents_read_own ON documents FOR SELECT TO authenticated
    USING (project_id = ANY ((SELECT agentworker_jwt_projects())::uuid[]));
