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
