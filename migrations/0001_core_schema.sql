-- 0001: the core schema (baseline). Canonical definitions live in sql/; later
-- migrations change both, and a test proves the two paths give the same catalog.

-- The harvest schema and its ledgers.
-- The migration runner also creates the two ledgers before the first migration
-- (it needs them to know what is applied); IF NOT EXISTS keeps both paths equal.

CREATE SCHEMA IF NOT EXISTS harvest;

CREATE TABLE IF NOT EXISTS harvest.schema_migrations (
    set_name text NOT NULL,
    version text NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    transactional boolean NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (set_name, version)
);

CREATE TABLE IF NOT EXISTS harvest.function_files (
    file_name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT function_files_pkey PRIMARY KEY (file_name)
);

-- Executions and their append-only event log.

CREATE TABLE harvest.executions (
    id uuid NOT NULL,
    workflow_name text NOT NULL,
    workflow_id text NOT NULL,
    status text NOT NULL DEFAULT 'RUNNING',
    task_queue text NOT NULL DEFAULT 'default',
    input jsonb NOT NULL DEFAULT '[]'::jsonb,
    output jsonb,
    failure jsonb,
    search_attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    parent_id uuid,
    last_event_id bigint NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    completed_at timestamptz,
    CONSTRAINT executions_pkey PRIMARY KEY (id),
    CONSTRAINT executions_status_check CHECK (status IN (
        'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
        'CONTINUED_AS_NEW'
    )),
    CONSTRAINT executions_search_attributes_object CHECK (
        jsonb_typeof(search_attributes) = 'object'
    )
);

-- One live run per business key; terminal runs keep their rows for history.
CREATE UNIQUE INDEX executions_active_workflow_id
ON harvest.executions (workflow_name, workflow_id)
WHERE status = 'RUNNING';

CREATE INDEX executions_workflow_id_latest
ON harvest.executions (workflow_name, workflow_id, created_at DESC);

CREATE INDEX executions_status_created
ON harvest.executions (status, created_at DESC, id);

CREATE INDEX executions_parent
ON harvest.executions (parent_id)
WHERE parent_id IS NOT NULL;

CREATE TABLE harvest.events (
    execution_id uuid NOT NULL,
    event_id bigint NOT NULL,
    event_type text NOT NULL,
    event_data jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (execution_id, event_id),
    CONSTRAINT events_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

-- The task queue: workflow tasks, activity tasks and timers, claimed with SKIP LOCKED.
-- A finished task is deleted, so the claimable index stays as small as the backlog.

CREATE TABLE harvest.tasks (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    priority integer NOT NULL DEFAULT 0,
    due_at timestamptz NOT NULL,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempt integer NOT NULL DEFAULT 0,
    scheduled_at timestamptz NOT NULL,
    -- schedule_to_close: the invocation fails for good after this, retries or not.
    deadline_at timestamptz,
    started_at timestamptz,
    lease_owner text,
    lease_expires_at timestamptz,
    fencing_token bigint NOT NULL DEFAULT 0,
    heartbeat_at timestamptz,
    heartbeat_details jsonb,
    last_failure jsonb,
    concurrency_key text,
    CONSTRAINT tasks_pkey PRIMARY KEY (id),
    CONSTRAINT tasks_kind_check CHECK (kind IN ('workflow', 'activity', 'timer')),
    CONSTRAINT tasks_status_check CHECK (status IN ('pending', 'running')),
    CONSTRAINT tasks_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

-- The claim path: the head of each queue, by priority then due time.
CREATE INDEX tasks_claimable
ON harvest.tasks (queue, priority DESC, due_at, id)
WHERE status = 'pending' AND kind <> 'timer';

-- Timers fire by due time.
CREATE INDEX tasks_timers_due
ON harvest.tasks (due_at)
WHERE kind = 'timer';

-- The timeout scanner: running tasks by lease expiry.
CREATE INDEX tasks_running_lease
ON harvest.tasks (lease_expires_at)
WHERE status = 'running';

-- At most one workflow task per execution: a wake-up finding one adds nothing.
CREATE UNIQUE INDEX tasks_one_workflow_task
ON harvest.tasks (execution_id)
WHERE kind = 'workflow';

-- An activity invocation (execution, seq) is one row for all its attempts.
CREATE UNIQUE INDEX tasks_activity_invocation
ON harvest.tasks (execution_id, seq)
WHERE kind IN ('activity', 'timer');

CREATE INDEX tasks_deadline
ON harvest.tasks (deadline_at)
WHERE deadline_at IS NOT NULL;

CREATE INDEX tasks_execution
ON harvest.tasks (execution_id);

-- Fencing tokens come from one sequence so a token is never reused.
CREATE SEQUENCE harvest.fencing_tokens;

-- Activity invocations that exhausted their retries, kept for inspection and replay.

CREATE TABLE harvest.dead_letters (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    workflow_name text NOT NULL,
    seq integer NOT NULL,
    activity_name text NOT NULL,
    queue text NOT NULL,
    input jsonb,
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL,
    failure jsonb NOT NULL,
    scheduled_at timestamptz NOT NULL,
    failed_at timestamptz NOT NULL,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (id),
    CONSTRAINT dead_letters_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

CREATE INDEX dead_letters_failed_at
ON harvest.dead_letters (failed_at DESC, id);

CREATE INDEX dead_letters_activity
ON harvest.dead_letters (activity_name, failed_at DESC);

CREATE INDEX dead_letters_execution
ON harvest.dead_letters (execution_id);

-- The worker registry: who is polling which queues, and whether it is alive.

CREATE TABLE harvest.workers (
    id text NOT NULL,
    queues text[] NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    status text NOT NULL DEFAULT 'active',
    started_at timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL,
    heartbeat_interval_secs double precision NOT NULL DEFAULT 10,
    drain_deadline timestamptz,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_status_check CHECK (status IN ('active', 'draining', 'stopped'))
);
