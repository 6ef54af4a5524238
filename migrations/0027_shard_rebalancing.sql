-- 0027: shard rebalancing (functions/rebalance.sql). The MIGRATING and MIGRATED
-- execution states (both inside the active-uniqueness index), the forwarding
-- pointer and residence chain columns, the migrations record on the source and
-- the staged-copy record on the target.

ALTER TABLE harvest.executions
ADD COLUMN migrated_to_shard integer,
ADD COLUMN migrated_from_shards integer[] NOT NULL DEFAULT '{}'::integer[];

ALTER TABLE harvest.executions DROP CONSTRAINT executions_status_check;
ALTER TABLE harvest.executions ADD CONSTRAINT executions_status_check CHECK (status IN (
    'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
    'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED'
));
ALTER TABLE harvest.executions ADD CONSTRAINT executions_migrated_to_shard_check CHECK (
    migrated_to_shard IS NULL
    OR (status IN ('MIGRATING', 'MIGRATED') AND migrated_to_shard BETWEEN 0 AND 65535)
);

DROP INDEX harvest.executions_active_workflow_id;
CREATE UNIQUE INDEX executions_active_workflow_id
ON harvest.executions (workflow_name, workflow_id)
WHERE status IN ('RUNNING', 'MIGRATING', 'MIGRATED');

CREATE TABLE harvest.shard_migrations (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    workflow_name text NOT NULL,
    workflow_id text NOT NULL,
    source_shard integer NOT NULL,
    target_shard integer NOT NULL,
    phase text NOT NULL DEFAULT 'planned',
    verified_event_count bigint,
    verified_max_event_id bigint,
    verified_digest text,
    operator_id text,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT shard_migrations_pkey PRIMARY KEY (id),
    CONSTRAINT shard_migrations_phase_check CHECK (
        phase IN ('planned', 'copied', 'verified', 'cut_over', 'completed', 'failed')
    ),
    CONSTRAINT shard_migrations_shards_check CHECK (
        source_shard BETWEEN 0 AND 65535 AND target_shard BETWEEN 0 AND 65535 AND source_shard <> target_shard
    )
);

CREATE UNIQUE INDEX shard_migrations_open
ON harvest.shard_migrations (execution_id)
WHERE phase IN ('planned', 'copied', 'verified', 'cut_over');

CREATE INDEX shard_migrations_stalled
ON harvest.shard_migrations (phase, updated_at)
WHERE phase IN ('planned', 'copied', 'verified', 'cut_over');

CREATE TABLE harvest.shard_arrivals (
    execution_id uuid NOT NULL,
    migration_id bigint NOT NULL,
    source_shard integer NOT NULL,
    tasks jsonb NOT NULL DEFAULT '[]'::jsonb,
    prior_seal jsonb,
    staged_at timestamptz NOT NULL,
    activated_at timestamptz,
    -- The event ids that arrived with copies (not appended here): the usage report
    -- counts each event on the shard that appended it, once across the fleet.
    copied_events int8multirange NOT NULL DEFAULT '{}'::int8multirange,
    CONSTRAINT shard_arrivals_pkey PRIMARY KEY (execution_id),
    CONSTRAINT shard_arrivals_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);
