-- 103 token revocation: an operator refuses every bearer token issued
-- before a moment, for one project or for every token (scope '*', service
-- tokens included). serve's /v1 guard refuses a token whose iat is before
-- the latest not_before of its scopes (its projects and '*'), or that has no
-- iat once one applies. `agentworker revoke` writes the rows.
CREATE TABLE agentworker_token_epochs (
    scope      text PRIMARY KEY
               CHECK (scope = '*' OR scope ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
    not_before timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Internal: for the owner only (the rule of migration 008).
ALTER TABLE agentworker_token_epochs ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON agentworker_token_epochs FROM PUBLIC, anon, authenticated, service_role;
