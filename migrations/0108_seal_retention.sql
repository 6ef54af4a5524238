-- harvest:no-transaction
-- 0108: MIGRATED seals leave the retention batches' index and get one of their own.
--
-- run_retention deleted a moved run's seal once its move was older than the window, while the
-- run could still be live on its new shard: by-id calls sent to the old shard then found
-- nothing. Seals are now judged where their run lives (functions/retention.sql:
-- list_expired_seals, list_moved_runs, delete_seals), so run_retention skips them, and
-- executions_retention leaves them out: a kept seal would be walked past by every batch.
-- (Outside a transaction, re-runnable: runs keep being written meanwhile. The new
-- executions_retention is built under another name and swapped in, so the retention batches
-- keep an index for the whole build; a build that failed half way leaves an invalid index
-- under the other name only, which the next run drops first.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_retention_0108;
CREATE INDEX CONCURRENTLY executions_retention_0108
ON harvest.executions (completed_at)
WHERE status NOT IN ('RUNNING', 'MIGRATED') AND end_owed_to_shard IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_retention;
ALTER INDEX harvest.executions_retention_0108 RENAME TO executions_retention;

DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_seals;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_seals
ON harvest.executions (completed_at, id)
WHERE status = 'MIGRATED';
