-- harvest:no-transaction
-- 0108: MIGRATED seals leave the retention batches' index and get one of their own.
--
-- run_retention deleted a moved run's seal once its move was older than the window, while the
-- run could still be live on its new shard: by-id calls sent to the old shard then found
-- nothing. Seals are now judged where their run lives (functions/retention.sql:
-- list_expired_seals, judge_moved_runs, drop_seals), so run_retention skips them, and
-- executions_retention leaves them out: a kept seal would be walked past by every batch.
-- (Outside a transaction, re-runnable: runs keep being written meanwhile. Dropped first, so a
-- run that failed half way leaves no invalid index behind for IF NOT EXISTS to keep.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_retention;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_retention
ON harvest.executions (completed_at)
WHERE status NOT IN ('RUNNING', 'MIGRATED') AND end_owed_to_shard IS NULL;

DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_seals;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_seals
ON harvest.executions (completed_at, id)
WHERE status = 'MIGRATED';
