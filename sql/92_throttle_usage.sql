-- Start throttle, debounce and batch (functions/throttle.sql): starts admitted
-- without an execution yet, released by the worker's scanner
-- (harvest.release_pending_starts). See docs/flow-control.md.

-- One row per deferred start. kind throttle: one row per start, released FIFO
-- per (workflow_name, gate_key) at the declared rate. kind debounce / batch: one
-- row per (workflow_name, gate_key) that later starts collapse into (debounce
-- keeps the latest input, batch appends it to the collected inputs), released at
-- release_at. gate_key is the resolved key ('' when the policy has no key path).
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

-- The collapse target of debounce and batch: one open row per (workflow, key).
CREATE UNIQUE INDEX pending_starts_collapse
ON harvest.pending_starts (kind, workflow_name, gate_key)
WHERE kind IN ('debounce', 'batch');

-- Due debounce / batch rows (and throttle rows backing off after an error).
CREATE INDEX pending_starts_release
ON harvest.pending_starts (release_at)
WHERE release_at IS NOT NULL;

-- The FIFO of one throttle bucket.
CREATE INDEX pending_starts_throttle
ON harvest.pending_starts (workflow_name, gate_key, id)
WHERE kind = 'throttle';

-- Token buckets of the start throttle, one per (workflow_name, gate_key); the
-- rate and burst are read from the declared policy when the bucket is used.
CREATE TABLE harvest.start_throttle_buckets (
    workflow_name text NOT NULL,
    gate_key text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    CONSTRAINT start_throttle_buckets_pkey PRIMARY KEY (workflow_name, gate_key)
);
