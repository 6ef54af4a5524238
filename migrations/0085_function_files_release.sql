-- 0085: the function-file ledger records which release applied each file
-- (harvest.function_files.package_version, the package's version), so that an older patch
-- release at the same schema version refuses to put its older functions/*.sql back over a
-- newer one's (harvest.db.migrate). Rows from before have none: NULL counts as the oldest
-- release, which any release replaces. IF NOT EXISTS: a fresh install's ledger (sql/ledger.sql,
-- run before the first migration) already has the column.
ALTER TABLE harvest.function_files ADD COLUMN IF NOT EXISTS package_version text;
