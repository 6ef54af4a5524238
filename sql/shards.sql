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
