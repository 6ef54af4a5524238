-- 0116: retention status's last_run_deleted is the last sweep's total, not its last batch's.
-- run_retention deletes one batch a call and the janitor (or run-now) calls it while rows
-- remain, so the field held the last batch's count: behind a backlog the tail of the sweep (or
-- the 0 of the round after it), never what the sweep deleted. A batch now adds to the total when
-- the batch before it left rows remaining (this column), and starts a new one otherwise.
ALTER TABLE harvest.retention_config ADD COLUMN IF NOT EXISTS last_run_remaining bigint;
