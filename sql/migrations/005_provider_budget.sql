-- The model providers' rate limits, shared by the replicas calling them.
--
-- A provider limits an API key, not a process. Every replica calling an
-- endpoint and model keeps one row here: its view of the key's limit and
-- a lease it renews about every second while it calls. Each replica paces
-- itself at its part of the limit the live rows agree on, by the calls
-- each had queued (demand), so together they stay within it; a replica that stops renewing (idle, or
-- dead) stops taking a share when its lease ends. Rows are small and
-- rewritten often: the table is internal and never read by apps.
CREATE TABLE llm_provider_budget (
    endpoint      text NOT NULL,
    model         text NOT NULL,
    replica       text NOT NULL,
    -- Requests and tokens per second the provider allows the key, all
    -- replicas together, as this replica sees it (0: unknown).
    rps           double precision NOT NULL CHECK (rps >= 0),
    tps           double precision NOT NULL DEFAULT 0 CHECK (tps >= 0),
    -- rps was read from the provider's x-ratelimit headers, rather than
    -- estimated from its refusals.
    learned       boolean NOT NULL DEFAULT false,
    -- rps is still being raised from a cautious start.
    probing       boolean NOT NULL DEFAULT false,
    -- When rps last changed, by the database's clock: the newest estimate
    -- is the one the replicas follow.
    changed_at    timestamptz NOT NULL DEFAULT now(),
    -- This replica's weight in the share: the calls it had queued, and 1.
    demand        double precision NOT NULL DEFAULT 1 CHECK (demand >= 1),
    -- The provider asked every caller to wait until then.
    blocked_until timestamptz,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (endpoint, model, replica)
) WITH (fillfactor = 50);

ALTER TABLE llm_provider_budget ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON llm_provider_budget FROM PUBLIC, anon, authenticated, service_role;
