-- harvest:no-transaction
-- 0119: a run's relays, found from an index (re-runnable: this file runs outside a transaction,
-- so the indexes are built without blocking the writes of harvest.relays).
--
-- A move's quiescence check (_migration_blockers: `harvest shard rebalance`'s candidates,
-- begin_migration, the cutover) asks whether a relay is addressed to the run or was sent by it,
-- and the retention janitor deletes its batch's runs' relays: no index led with either column, so
-- each read every relay of the shard (at 100,000 relays: 4 ms a run's check, 430 ms of CPU for
-- the candidates of one `rebalance --limit 100`, 5 ms of a janitor batch's 52). Each is now a probe of relays_target or
-- relays_source (partial: a child's end and a parent's close have no source, so they write
-- no entry to it). A failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS
-- would keep: it is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.relays_target;
CREATE INDEX CONCURRENTLY IF NOT EXISTS relays_target
ON harvest.relays (target_execution_id);
DROP INDEX CONCURRENTLY IF EXISTS harvest.relays_source;
CREATE INDEX CONCURRENTLY IF NOT EXISTS relays_source
ON harvest.relays (source_execution_id) WHERE source_execution_id IS NOT NULL;
