-- The harvest schema and its ledgers: the first file of a fresh install, and what
-- the migration runner runs before the first migration (it needs the ledgers to
-- know what is applied; harvest.db.paths.ledger_file). IF NOT EXISTS makes a
-- second run, and migration 0001's historical copy, a no-op.

CREATE SCHEMA IF NOT EXISTS harvest;

CREATE TABLE IF NOT EXISTS harvest.schema_migrations (
    set_name text NOT NULL,
    version text NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    transactional boolean NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (set_name, version)
);

CREATE TABLE IF NOT EXISTS harvest.function_files (
    file_name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- the Harvest release (package version) that applied the file; NULL: one from before
    -- migration 0085, which did not record it (the oldest)
    package_version text,
    CONSTRAINT function_files_pkey PRIMARY KEY (file_name)
);
