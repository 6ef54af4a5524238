-- 0032: API tokens for the management API (sql/api_tokens.sql), the audit log's
-- login and route (the actor a request asserts is recorded beside the login that made
-- the call; rows written before keep their actor as their login), and the event
-- stream: every event's global_id (its cursor in GET /stream; the existing rows are
-- numbered in no particular order, so a stream resumes only from events written after
-- the upgrade) and the table of live stream listeners (sql/event_streams.sql).
-- Adding global_id rewrites harvest.events once.

CREATE TABLE harvest.api_tokens (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    scope text NOT NULL,
    secret_hash bytea NOT NULL,
    created_at timestamptz NOT NULL,
    created_by text NOT NULL,
    revoked_at timestamptz,
    revoked_by text,
    CONSTRAINT api_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT api_tokens_scope_known CHECK (scope IN ('read', 'operate', 'admin')),
    CONSTRAINT api_tokens_name_shape CHECK (btrim(name) <> '' AND length(name) <= 100),
    CONSTRAINT api_tokens_secret_hash_sha256 CHECK (octet_length(secret_hash) = 32)
);

CREATE UNIQUE INDEX api_tokens_secret_hash
ON harvest.api_tokens (secret_hash);

CREATE UNIQUE INDEX api_tokens_live_name
ON harvest.api_tokens (name) WHERE revoked_at IS NULL;

ALTER TABLE harvest.audit_log
ADD COLUMN login text,
ADD COLUMN route text;

UPDATE harvest.audit_log SET login = actor;

ALTER TABLE harvest.events
ADD COLUMN global_id bigint GENERATED ALWAYS AS IDENTITY;

CREATE UNIQUE INDEX events_global_id
ON harvest.events (global_id);

CREATE TABLE harvest.event_stream_listeners (
    listener_id text NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    CONSTRAINT event_stream_listeners_pkey PRIMARY KEY (listener_id)
);
