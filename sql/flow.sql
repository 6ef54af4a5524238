-- Flow control: declared policies and their state: per-key concurrency slots,
-- rate-limit buckets, the durable mutex, the start throttle / debounce / batch,
-- and the fairness cursor (functions/flow_concurrency.sql, flow_rate_limits.sql, flow_quotas.sql,
-- flow_mutex.sql, flow_throttle.sql, claim.sql). Every gate is decided inside Postgres in
-- the claim or start transaction; see docs/flow-control.md. The gate columns of
-- a run and a task live on harvest.executions and harvest.tasks.

-- Policies declared by the code (a worker declares its App's at start-up), read
-- by start_workflow, so every start path (client, child, continue-as-new, psql)
-- gets the same gates. kind is 'workflow' or 'activity'.
CREATE TABLE harvest.flow_policies (
    kind text NOT NULL,
    name text NOT NULL,
    policy jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamptz NOT NULL,
    CONSTRAINT flow_policies_pkey PRIMARY KEY (kind, name),
    CONSTRAINT flow_policies_kind_check CHECK (kind IN ('workflow', 'activity')),
    CONSTRAINT flow_policies_policy_object CHECK (jsonb_typeof(policy) = 'object')
);

-- One row per flow key a start was admitted under (functions/flow_quotas.sql,
-- flow_concurrency.sql): kind 'quota' (a quota key, before its usage is counted) or
-- 'concurrency' (a cancel_running key, before its runs are read for superseding).
-- Each such start updates the row first: the row lock serialises the starts of a key,
-- and a start whose transaction reads one snapshot (REPEATABLE READ, SERIALIZABLE: a
-- start inside a caller's own transaction) that predates another start of the key
-- fails on the update (40001, retryable) instead of counting without it.
-- The row is a lock and holds nothing else. The retention janitor deletes the rows no start
-- needs (functions/retention.sql, prune_flow_keys).
CREATE TABLE harvest.flow_keys (
    kind text NOT NULL,
    key text NOT NULL,
    CONSTRAINT flow_keys_pkey PRIMARY KEY (kind, key),
    CONSTRAINT flow_keys_kind_check CHECK (kind IN ('quota', 'concurrency'))
);

-- The history bytes of a quota key's ended runs (every kept run not RUNNING or PAUSED), for the
-- max_history_bytes quota (functions/flow_quotas.sql, quota_usage: these plus the key's live runs'
-- bytes, read through executions_live_quota_key). An ended run's history_bytes no longer changes,
-- so its bytes are written once, by the triggers of the transaction that ends, moves or deletes
-- the run (sql/triggers.sql, executions_quota_bytes*): a row each, added, never updated, so two
-- closes of one key, or of two keys in either order, never wait for each other. A key's rows are
-- folded into one (_fold_quota_bytes) by its next quota'd start (at READ COMMITTED), by the
-- delete that spends them, and by the janitor's round (functions/retention.sql,
-- prune_flow_keys). No primary key: a key has a few rows between folds, found by the index (migration 0103).
CREATE TABLE harvest.quota_ended_bytes (
    quota_key text NOT NULL,
    bytes bigint NOT NULL
);

CREATE INDEX quota_ended_bytes_key
ON harvest.quota_ended_bytes (quota_key);

-- Admitted runs of a per-key workflow concurrency policy ("defer"): one row from
-- the claim of the run's first workflow task until the run leaves RUNNING.
-- No foreign key: the claim must not lock execution rows.
CREATE TABLE harvest.workflow_slots (
    execution_id uuid NOT NULL,
    concurrency_key text NOT NULL,
    workflow_name text NOT NULL,
    admitted_at timestamptz NOT NULL,
    CONSTRAINT workflow_slots_pkey PRIMARY KEY (execution_id)
);

CREATE INDEX workflow_slots_key
ON harvest.workflow_slots (concurrency_key);

-- Token buckets of activity rate limits, with a TTL'd pacing override.
CREATE TABLE harvest.rate_limit_buckets (
    bucket_key text NOT NULL,
    activity_name text NOT NULL,
    rps double precision NOT NULL,
    burst double precision NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    dynamic boolean NOT NULL DEFAULT false,
    override_rps double precision,
    override_burst double precision,
    override_expires_at timestamptz,
    -- An override (or its clear) re-paced a full batch of the tasks the bucket holds back: how
    -- many more the scanner's passes may move, a batch a pass (functions/flow_rate_limits.sql,
    -- _repace_rate_buckets); NULL: none. A budget, not a flag: while claims lag the line, every
    -- pass finds a full batch whose time changes, and a flag kept the scanner rewriting it.
    repace_left integer,
    CONSTRAINT rate_limit_buckets_pkey PRIMARY KEY (bucket_key),
    CONSTRAINT rate_limit_buckets_rps_check CHECK (rps > 0 AND burst >= 1),
    CONSTRAINT rate_limit_buckets_override_check CHECK (
        (override_expires_at IS NULL) = (override_rps IS NULL)
        AND (override_rps IS NULL OR (override_rps > 0 AND override_burst >= 1))
    )
);

-- The buckets whose held tasks the scanner still re-paces: none, mostly (a probe of an empty
-- index each pass). A claim's write of the tokens changes no indexed column, so it stays HOT.
CREATE INDEX rate_limit_buckets_repace
ON harvest.rate_limit_buckets (bucket_key)
WHERE repace_left IS NOT NULL;

-- The durable mutex: one holder per key, FIFO waiters.
CREATE TABLE harvest.mutex_locks (
    lock_key text NOT NULL,
    holder_execution_id uuid NOT NULL,
    acquired_at timestamptz NOT NULL,
    CONSTRAINT mutex_locks_pkey PRIMARY KEY (lock_key)
);

CREATE INDEX mutex_locks_holder
ON harvest.mutex_locks (holder_execution_id);

CREATE TABLE harvest.mutex_waiters (
    id bigint GENERATED ALWAYS AS IDENTITY,
    lock_key text NOT NULL,
    execution_id uuid NOT NULL,
    seq integer NOT NULL,
    enqueued_at timestamptz NOT NULL,
    CONSTRAINT mutex_waiters_pkey PRIMARY KEY (id),
    CONSTRAINT mutex_waiters_execution_seq UNIQUE (execution_id, seq)
);

CREATE INDEX mutex_waiters_key
ON harvest.mutex_waiters (lock_key, id);

-- Start throttle, debounce and batch (functions/flow_throttle.sql): starts admitted
-- without an execution yet, released by the worker's scanner
-- (harvest.release_pending_starts).
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
    queue text NOT NULL,
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
    -- The W3C traceparent of the deferred start's caller (tracing on; debounce and batch:
    -- the latest caller's that had one): the released run continues it.
    traceparent text,
    -- The logins that made it (a batch: each whose argument it collected; a debounce: the
    -- latest caller's): its release hands the run only their run-less offloaded rows that its
    -- input references (_release_pending_start). NULL on a row made before 0124.
    logins text[],
    -- The run-less offloaded rows its release hands the run: each one its input references that
    -- the login of the start whose input names it stored (a batch: every argument's own
    -- starter's; a debounce: the latest caller's), recorded as the start is deferred, so one
    -- starter's argument cannot name another's row. NULL on a row made before 0128 (its
    -- release hands by logins).
    payload_ids uuid[],
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

-- The operators' list, oldest first, a page after a position (list_pending_starts' keyset) and
-- a discard by filter's oldest first (discard_pending_starts); the second for one workflow's.
CREATE INDEX pending_starts_listed
ON harvest.pending_starts (created_at, id);

CREATE INDEX pending_starts_workflow_listed
ON harvest.pending_starts (workflow_name, created_at, id);

-- Token buckets of the start throttle, one per (workflow_name, gate_key); the
-- rate and burst are read from the declared policy when the bucket is used, or
-- from a live pacing override (override_expires_at in the future) of a throttle
-- declared without a key (functions/flow_throttle.sql).
CREATE TABLE harvest.start_throttle_buckets (
    workflow_name text NOT NULL,
    gate_key text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    override_rps double precision,
    override_burst double precision,
    override_expires_at timestamptz,
    CONSTRAINT start_throttle_buckets_pkey PRIMARY KEY (workflow_name, gate_key)
);

-- The queues that hold (or held) fairness-keyed work, and where the fairness
-- skip-scan of each starts next when it holds more keys than one claim visits
-- (the claim advances cursor_key, never waiting). On such a queue an unkeyed
-- task gets the key '' (the unkeyed group), so the skip-scan finds it too.
CREATE TABLE harvest.fair_queues (
    queue text NOT NULL,
    cursor_key text,
    CONSTRAINT fair_queues_pkey PRIMARY KEY (queue)
);

-- What a claim's windows hand the admission gates of a candidate that carries a gate
-- (a concurrency or rate key): the columns harvest._admit_candidates and
-- harvest._lock_rate_buckets judge it by, options only for a rate-keyed one, as the
-- windows read the row (functions/claim.sql; docs/performance.md, "The gates read the
-- windows' columns").
CREATE TYPE harvest.gated_candidate AS (
    id bigint,
    kind text,
    execution_id uuid,
    concurrency_key text,
    concurrency_limit integer,
    rate_key text,
    priority integer,
    due_at timestamptz,
    activity_name text,
    options jsonb
);
