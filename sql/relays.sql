-- Relay rows: an effect on another execution (a child's end reaching its parent,
-- a parent's end reaching its children, a workflow signalling or cancelling
-- another), written in the same transaction as its cause and delivered without
-- ever waiting on the target's lock.
--
-- External signals and cancels (kinds external_signal, external_cancel, 0024)
-- carry their source (source_execution_id, source_seq: where the outcome goes
-- back) and their target: an execution id, or a business key
-- (target_workflow_id, optionally target_workflow_name) with no id. A row this
-- database cannot settle alone (a target on another shard, or a business key
-- when harvest.engine_settings.cross_shard_relays is on) is `remote`: the local
-- deliverers skip it and the cross-shard pump claims it (claimed_until,
-- attempts, last_error; docs/internals.md, "Relays across shards").
-- target_shard is the shard that must apply it (harvest.shard_of of the id), or
-- NULL for a business key, which every shard is asked about.

CREATE TABLE harvest.relays (
    id bigint GENERATED ALWAYS AS IDENTITY,
    target_execution_id uuid,
    kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    source_execution_id uuid,
    source_seq integer,
    target_workflow_id text,
    target_workflow_name text,
    target_shard integer,
    remote boolean NOT NULL DEFAULT false,
    claimed_until timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    CONSTRAINT relays_pkey PRIMARY KEY (id),
    CONSTRAINT relays_kind_check CHECK (
        kind IN ('child_closed', 'parent_closed', 'external_signal', 'external_cancel')
    ),
    -- Only an external signal or cancel may name its target by business key, and it
    -- always says where its outcome goes.
    CONSTRAINT relays_target_check CHECK (
        target_execution_id IS NOT NULL
        OR (kind IN ('external_signal', 'external_cancel') AND target_workflow_id IS NOT NULL)
    ),
    CONSTRAINT relays_source_check CHECK (
        kind NOT IN ('external_signal', 'external_cancel')
        OR (source_execution_id IS NOT NULL AND source_seq IS NOT NULL)
    ),
    CONSTRAINT relays_target_shard_range CHECK (target_shard BETWEEN 0 AND 65535)
);

-- The cross-shard pump's claim order (docs/internals.md, "Relays across shards").
CREATE INDEX relays_remote ON harvest.relays (id) WHERE remote;

-- A run's relays, addressed to it or sent by it (an external signal or cancel whose outcome
-- is still to come back): a move's quiescence check (_migration_blockers: a rebalance's
-- candidates, begin_migration, the cutover) and the retention janitor's delete of its runs'
-- relays probe these, where each read every relay of the shard before (migration 0119).
CREATE INDEX relays_target ON harvest.relays (target_execution_id);
CREATE INDEX relays_source ON harvest.relays (source_execution_id) WHERE source_execution_id IS NOT NULL;

-- Receipts of relays applied here on behalf of another shard's relay row
-- (harvest.deliver_external_relay): one per (source shard, relay id), so a pump
-- that retries after a lost answer gets the first outcome back and the effect is
-- applied once (only an outcome with an effect is kept). Deleted by retention
-- after the retention window.
CREATE TABLE harvest.relay_receipts (
    source_shard integer NOT NULL,
    relay_id bigint NOT NULL,
    outcome text NOT NULL,
    target_execution_id uuid,
    message text,
    received_at timestamptz NOT NULL,
    CONSTRAINT relay_receipts_pkey PRIMARY KEY (source_shard, relay_id),
    CONSTRAINT relay_receipts_outcome_check CHECK (
        outcome IN ('delivered', 'already_requested')
    )
);

-- The janitor's receipts past the window, oldest first, a batch at a time (run_retention;
-- migration 0098).
CREATE INDEX relay_receipts_received
ON harvest.relay_receipts (received_at);
