-- harvest:no-transaction
-- 0105: a rebalance's schedule_run blocker (functions/rebalance.sql, _migration_blockers) asks,
-- for each candidate run, whether a started firing carries its workflow id. No index served
-- schedule_firings by workflow id, so each probe read the whole table, which keeps up to 1,000
-- firings a schedule: with 100 schedules' 100,000 started firings, listing 1,000 candidates took
-- 13-28 s and each begin_migration 10-30 ms. The started firings by workflow id make it one probe.
-- (Re-runnable, outside a transaction: the firings keep being written while it builds. A failed
-- CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: dropped first.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.schedule_firings_started;
CREATE INDEX CONCURRENTLY IF NOT EXISTS schedule_firings_started
ON harvest.schedule_firings (workflow_id)
WHERE status = 'started';
