-- The audit log of operator actions.

-- Who did what to the engine from outside it (cancels, terminations, resets,
-- dead-letter replays and discards, rate-limit overrides, worker drains,
-- retention settings and runs): one row per request. source is the face it came
-- through (api, cli or ui; NULL on rows written before migration 0019). actor is who
-- the caller says acted (a token's name through the HTTP API; the login when nothing is
-- said), login the database login that made the call, always (0032); acting_role the role
-- the call acted as: the one the session set (SET ROLE: a token's scope through the HTTP
-- API), else the login (NULL on rows written before migration 0096); route the HTTP
-- route or CLI command the caller names (docs/auth.md, "Audit").
CREATE TABLE harvest.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    operator_id text,
    operation text NOT NULL,
    target text,
    details jsonb NOT NULL DEFAULT '{}'::jsonb,
    source text,
    login text,
    route text,
    acting_role text,
    CONSTRAINT audit_log_pkey PRIMARY KEY (id),
    CONSTRAINT audit_log_source_known CHECK (source IN ('api', 'cli', 'ui'))
);

-- list_audit_log of one operation, in its order (migration 0094).
CREATE INDEX audit_log_operation_newest
ON harvest.audit_log (operation, at DESC, id DESC);

-- list_audit_log's order (newest first by time, then id), the order shards' rows are merged in.
CREATE INDEX audit_log_at
ON harvest.audit_log (at DESC, id DESC);
