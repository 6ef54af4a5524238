-- Engine-wide settings that only the schema owner (or a superuser) may change:
-- whether the test clock (harvest.fake_now) is honoured, and the largest payload
-- (input, result, signal or update argument) the engine accepts, and the widest
-- window of the usage report, and whether other shards hold targets of this
-- database's relays (cross_shard_relays, 0024), and the shared test clock's
-- offset (test_clock_offset, 0035). One row.

CREATE TABLE harvest.engine_settings (
    id boolean NOT NULL DEFAULT true,
    test_clock_allowed boolean NOT NULL DEFAULT false,
    max_payload_bytes integer NOT NULL DEFAULT 2097152,
    -- The widest window harvest.count_usage reads (0017); a caller may ask for less.
    usage_max_window interval NOT NULL DEFAULT interval '90 days',
    -- Off (one database): a relay settles here, a business key not found here is not
    -- found, and a target id minted for another shard is reported unreachable. On
    -- (shards with a cross-shard pump): such relays wait for the pump (0024;
    -- docs/internals.md, "Relays across shards").
    cross_shard_relays boolean NOT NULL DEFAULT false,
    -- The shared test clock (0035): a session whose harvest.fake_now is 'shared' reads
    -- now() + this offset, while test_clock_allowed is on. The test kit's time skipping
    -- (harvest.testing.WorkflowEnvironment) moves every such session at once by moving it.
    test_clock_offset interval NOT NULL DEFAULT interval '0',
    CONSTRAINT engine_settings_pkey PRIMARY KEY (id),
    CONSTRAINT engine_settings_one_row CHECK (id),
    CONSTRAINT engine_settings_max_payload_bytes_positive CHECK (max_payload_bytes > 0),
    CONSTRAINT engine_settings_usage_max_window_positive CHECK (usage_max_window > interval '0')
);

INSERT INTO harvest.engine_settings DEFAULT VALUES;
