-- The harvest schema and its ledgers.
-- The migration runner also creates the two ledgers before the first migration
-- (it needs them to know what is applied); IF NOT EXISTS keeps both paths equal.

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
    CONSTRAINT function_files_pkey PRIMARY KEY (file_name)
);
