-- 0023: a database knows its shard (sql/shards.sql, functions/shards.sql). A
-- database migrated before this was a single database, shard 0, as every id it
-- minted says; `harvest migrate run --shard-id N` sets another number.

CREATE TABLE harvest.shard_identity (
    id boolean NOT NULL DEFAULT true,
    shard_id integer NOT NULL DEFAULT 0,
    updated_at timestamptz,
    CONSTRAINT shard_identity_pkey PRIMARY KEY (id),
    CONSTRAINT shard_identity_one_row CHECK (id),
    CONSTRAINT shard_identity_shard_id_range CHECK (shard_id BETWEEN 0 AND 65535)
);

INSERT INTO harvest.shard_identity DEFAULT VALUES;
