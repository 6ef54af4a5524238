-- 0008: start throttle, debounce and batch (pending starts released by the
-- scanner, throttle token buckets); start_workflow gains p_flow_gates, so its
-- old signature is dropped (functions/start.sql recreates it). The usage report
-- (functions/usage.sql) needs no schema.

DROP FUNCTION IF EXISTS harvest.start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, uuid, integer, double precision, double precision
);

CREATE TABLE harvest.pending_starts (
    id bigint GENERATED ALWAYS AS IDENTITY,
    kind text NOT NULL,
    workflow_name text NOT NULL,
    gate_key text NOT NULL,
    workflow_id text NOT NULL,
    task_queue text NOT NULL,
    input jsonb NOT NULL,
    search_attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority integer NOT NULL DEFAULT 0,
    reuse_policy text NOT NULL DEFAULT 'allow_duplicate',
    execution_timeout_secs double precision,
    run_timeout_secs double precision,
    starts integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    release_at timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    CONSTRAINT pending_starts_pkey PRIMARY KEY (id),
    CONSTRAINT pending_starts_kind_check CHECK (kind IN ('throttle', 'debounce', 'batch'))
);

CREATE UNIQUE INDEX pending_starts_collapse
ON harvest.pending_starts (kind, workflow_name, gate_key)
WHERE kind IN ('debounce', 'batch');

CREATE INDEX pending_starts_release
ON harvest.pending_starts (release_at)
WHERE release_at IS NOT NULL;

CREATE INDEX pending_starts_throttle
ON harvest.pending_starts (workflow_name, gate_key, id)
WHERE kind = 'throttle';

CREATE TABLE harvest.start_throttle_buckets (
    workflow_name text NOT NULL,
    gate_key text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    CONSTRAINT start_throttle_buckets_pkey PRIMARY KEY (workflow_name, gate_key)
);
