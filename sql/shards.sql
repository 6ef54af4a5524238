-- Shard identity (functions/shards.sql): which shard this database is. One row.
-- Every execution id carries its shard in its first two bytes (harvest.shard_of);
-- start_workflow mints ids for this shard only and refuses a start addressed to
-- another (HR011). A database is shard 0 until `harvest migrate run --shard-id N`
-- (harvest.set_shard_id) says otherwise.

CREATE TABLE harvest.shard_identity (
    id boolean NOT NULL DEFAULT true,
    shard_id integer NOT NULL DEFAULT 0,
    updated_at timestamptz,
    CONSTRAINT shard_identity_pkey PRIMARY KEY (id),
    CONSTRAINT shard_identity_one_row CHECK (id),
    CONSTRAINT shard_identity_shard_id_range CHECK (shard_id BETWEEN 0 AND 65535)
);

INSERT INTO harvest.shard_identity DEFAULT VALUES;

-- Shard rebalancing (functions/rebalance.sql, docs/sharding.md "Rebalancing").
-- The durable record of each move of a quiescent execution, kept on the source
-- shard, which stays authoritative up to the cutover. phase: planned (quiescence
-- checked, nothing copied) -> copied (the target holds a staged MIGRATING copy) ->
-- verified (the copy's history matched the source's, verified_event_count and
-- verified_max_event_id are the source's high-water mark) -> cut_over (the one
-- atomic commit: the source row is MIGRATED and points at the target) ->
-- completed (the target copy is RUNNING); failed ends a move before its cutover.
-- No foreign key: the record outlives the retention of the sealed row.
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

-- At most one open move per execution: of two rebalancers, one plans it.
CREATE UNIQUE INDEX shard_migrations_open
ON harvest.shard_migrations (execution_id)
WHERE phase IN ('planned', 'copied', 'verified', 'cut_over');

-- The resume sweeps: open records by age.
CREATE INDEX shard_migrations_stalled
ON harvest.shard_migrations (phase, updated_at)
WHERE phase IN ('planned', 'copied', 'verified', 'cut_over');

-- The target side of a move: one row per staged copy, holding the copied task rows
-- (timers, ...) until activation inserts them, so a staged copy is claimable by no
-- worker and fires no timer; prior_seal keeps the MIGRATED row a reverse move
-- (A -> B -> A) staged over, so an abort restores it in place.
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
