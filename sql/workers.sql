-- The worker registry: who is polling which queues, whether it is alive, and
-- which workflow names the workers of each queue registered.

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
    -- A worker marks itself asleep before waiting for a notification, so producers
    -- notify only when a wake-up is needed (functions/core.sql _notify_queue).
    sleeping boolean NOT NULL DEFAULT false,
    -- How long the worker may go without a heartbeat before it is lost (it registers it: by
    -- default 6 x its heartbeat interval), and when that is: last_heartbeat_at + lost_after_secs,
    -- written with each heartbeat. NULL once it stopped, or once the scanner took back the tasks
    -- it held (functions/timeouts.sql, expire_lost_workers).
    lost_after_secs double precision NOT NULL DEFAULT 60,
    lost_at timestamptz,
    -- The process that registered the id last (the worker draws one per start): a register
    -- under the same id by another process takes back the tasks its predecessor held, and the
    -- predecessor's heartbeats, drain and stop change nothing of its successor's
    -- (register_worker). NULL: registered by a caller that named none.
    incarnation text,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_status_check CHECK (status IN ('active', 'draining', 'stopped'))
);

-- The lost workers the scanner takes tasks back from (expire_lost_workers): while every
-- worker heartbeats, one probe of this index finds none.
CREATE INDEX workers_lost ON harvest.workers (lost_at) WHERE lost_at IS NOT NULL;

-- The workflow names the workers of each queue registered (harvest.register_workflows,
-- called by every worker as it starts): a start of a name that no worker ever registered
-- on a queue that has registrations is refused up front (HR010, start.sql). A name stays
-- registered after the last worker that had it stops, so a restart or a rolling deploy
-- never refuses a start; harvest.unregister_workflow retires one.
CREATE TABLE harvest.registered_workflows (
    queue text NOT NULL,
    workflow_name text NOT NULL,
    first_registered_at timestamptz NOT NULL,
    last_registered_at timestamptz NOT NULL,
    CONSTRAINT registered_workflows_pkey PRIMARY KEY (queue, workflow_name)
);

-- A start that names no queue reads a workflow's queues by its name (start.sql, _start_queue).
CREATE INDEX registered_workflows_by_name ON harvest.registered_workflows (workflow_name);
