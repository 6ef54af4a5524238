-- Flow control: per-key concurrency caps, latest-wins supersede, rate limits,
-- quotas and the durable mutex (functions/concurrency.sql, ratelimit.sql,
-- quotas.sql, mutex.sql). Every gate is decided inside Postgres in the claim or
-- start transaction; see docs/flow-control.md.

-- Task rows carry their gates as columns, so the claim's gate predicates read
-- plain columns and the partial index below covers exactly the capped rows.
-- concurrency_key (already on harvest.tasks) names the cap; concurrency_limit
-- is its N; rate_key names the token bucket of a rate-limited activity.
ALTER TABLE harvest.tasks
ADD COLUMN concurrency_limit integer,
ADD COLUMN rate_key text,
ADD CONSTRAINT tasks_concurrency_limit_check CHECK (concurrency_limit IS NULL OR concurrency_limit >= 1);

-- The resolved per-key workflow concurrency key and quota key of a run.
ALTER TABLE harvest.executions
ADD COLUMN concurrency_key text,
ADD COLUMN quota_key text;

-- In-flight per key: running task rows with a key. Tasks without a key are not
-- in this index, so uncapped work pays nothing for it.
CREATE INDEX tasks_concurrency_running
ON harvest.tasks (concurrency_key)
WHERE status = 'running' AND concurrency_key IS NOT NULL;

-- The supersede scan: non-terminal runs of one workflow type and key, oldest first.
CREATE INDEX executions_concurrency_key
ON harvest.executions (workflow_name, concurrency_key, created_at)
WHERE status = 'RUNNING' AND concurrency_key IS NOT NULL;

-- Quota usage per key.
CREATE INDEX executions_quota_key
ON harvest.executions (quota_key)
WHERE quota_key IS NOT NULL;

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
    CONSTRAINT rate_limit_buckets_pkey PRIMARY KEY (bucket_key),
    CONSTRAINT rate_limit_buckets_rps_check CHECK (rps > 0 AND burst >= 1),
    CONSTRAINT rate_limit_buckets_override_check CHECK (
        (override_expires_at IS NULL) = (override_rps IS NULL)
        AND (override_rps IS NULL OR (override_rps > 0 AND override_burst >= 1))
    )
);

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

-- Activity task rows take their gate columns from their options at insert
-- (decide.sql and the dead-letter replay write options only). The WHEN clause
-- keeps the trigger from firing for tasks without a gate.
CREATE FUNCTION harvest._tasks_flow_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._flow_task_columns(NEW);
END;
$$;

CREATE TRIGGER tasks_flow_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
WHEN (new.kind = 'activity' AND new.options ?| ARRAY['concurrency_key', 'rate_limit'])
EXECUTE FUNCTION harvest._tasks_flow_columns();

-- A run leaving RUNNING (any path: completion, failure, cancel, terminate,
-- timeout, reset, supersede) gives back its workflow slot and its mutexes in
-- the same transaction.
CREATE FUNCTION harvest._executions_flow_release()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._flow_release(NEW.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_flow_release
AFTER UPDATE OF status ON harvest.executions
FOR EACH ROW
WHEN (old.status = 'RUNNING' AND new.status <> 'RUNNING')
EXECUTE FUNCTION harvest._executions_flow_release();

-- Mutex markers (record_marker kind mutex_acquire / mutex_release) take effect
-- in the transaction that records them (functions/mutex.sql).
CREATE FUNCTION harvest._events_mutex()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._mutex_on_marker(NEW);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_mutex
AFTER INSERT ON harvest.events
FOR EACH ROW
WHEN (new.event_type = 'MarkerRecorded' AND new.event_data ->> 'kind' IN ('mutex_acquire', 'mutex_release'))
EXECUTE FUNCTION harvest._events_mutex();
