-- 0028: owner mode (sql/owners.sql, functions/owners.sql): the per-database switch,
-- off, and the 512 decision partitions' owner rows, all free. The calls that now
-- carry an owner epoch get new signatures: drop the old ones so the function files
-- create the new ones instead of overloads.

CREATE TABLE harvest.owner_mode (
    id boolean NOT NULL DEFAULT true,
    enabled boolean NOT NULL DEFAULT false,
    lease_secs double precision NOT NULL DEFAULT 30,
    updated_at timestamptz,
    CONSTRAINT owner_mode_pkey PRIMARY KEY (id),
    CONSTRAINT owner_mode_one_row CHECK (id),
    CONSTRAINT owner_mode_lease_secs_range CHECK (lease_secs >= 0.1 AND lease_secs <= 3600)
);

INSERT INTO harvest.owner_mode DEFAULT VALUES;

CREATE TABLE harvest.partition_owners (
    partition_id integer NOT NULL,
    worker_id text,
    epoch bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    acquired_at timestamptz,
    CONSTRAINT partition_owners_pkey PRIMARY KEY (partition_id),
    CONSTRAINT partition_owners_partition_id_range CHECK (partition_id BETWEEN 0 AND 511)
);

INSERT INTO harvest.partition_owners (partition_id) SELECT generate_series(0, 511);

-- claim_tasks returns owner_epoch; the decision commits take the epoch they were handed.
DROP FUNCTION IF EXISTS harvest.claim_tasks(text, text[], integer, double precision);
DROP FUNCTION IF EXISTS harvest.complete_workflow_task(bigint, bigint, bigint, jsonb, text, bigint, bigint, integer);
DROP FUNCTION IF EXISTS harvest.complete_workflow_tasks(
    text, bigint[], bigint[], bigint[], jsonb[], integer[], bigint, bigint
);
DROP FUNCTION IF EXISTS harvest._apply_decision(
    uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[]
);
