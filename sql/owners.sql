-- Owner mode (functions/owners.sql, docs/sharding.md "Owner mode"): the executions
-- of a database fall into 512 decision partitions by a hash of their workflow_id
-- (harvest.partition_of). With the switch on, a worker that claims a workflow task
-- acquires its partition's owner row (a lease; each acquisition moves the epoch on),
-- and every decision commit checks the epoch it was handed against the row, so a
-- worker that lost the partition cannot commit. Off by default.

-- The per-database switch: one row, changed only by harvest.set_owner_mode (admin).
CREATE TABLE harvest.owner_mode (
    id boolean NOT NULL DEFAULT true,
    enabled boolean NOT NULL DEFAULT false,
    -- How long an owner row's lease lasts after an acquisition or a renewal.
    lease_secs double precision NOT NULL DEFAULT 30,
    updated_at timestamptz,
    CONSTRAINT owner_mode_pkey PRIMARY KEY (id),
    CONSTRAINT owner_mode_one_row CHECK (id),
    CONSTRAINT owner_mode_lease_secs_range CHECK (lease_secs >= 0.1 AND lease_secs <= 3600)
);

INSERT INTO harvest.owner_mode DEFAULT VALUES;

-- One owner row per decision partition (0..511), all present from the start: the
-- worker that holds it (NULL: nobody), the epoch of its acquisition and when its
-- lease ends.
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
