-- Retention of finished runs and stale worker rows (functions/retention.sql).

-- Retention: one settings row. max_age NULL means "keep everything".
CREATE TABLE harvest.retention_config (
    id boolean NOT NULL DEFAULT true,
    max_age interval,
    batch_size integer NOT NULL DEFAULT 500,
    updated_at timestamptz,
    last_run_at timestamptz,
    last_run_deleted bigint,
    -- Stopped and stale worker rows whose last heartbeat is older are deleted (0017);
    -- NULL keeps every row.
    worker_max_age interval DEFAULT interval '7 days',
    -- What the last run_retention batch left to delete (counted up to 10,000): a batch after one
    -- that left some continues its sweep, and last_run_deleted adds up the sweep's batches (0116).
    last_run_remaining bigint,
    CONSTRAINT retention_config_pkey PRIMARY KEY (id),
    CONSTRAINT retention_config_single_row CHECK (id),
    CONSTRAINT retention_config_batch_size_check CHECK (batch_size BETWEEN 1 AND 10000),
    CONSTRAINT retention_config_max_age_check CHECK (max_age IS NULL OR max_age > interval '0'),
    CONSTRAINT retention_config_worker_max_age_check CHECK (worker_max_age IS NULL OR worker_max_age > interval '0')
);

INSERT INTO harvest.retention_config (id) VALUES (true) ON CONFLICT DO NOTHING;
