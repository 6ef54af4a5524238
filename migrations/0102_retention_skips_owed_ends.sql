-- harvest:no-transaction
-- 0102: the retention janitor reads no run whose end is owed to a parent's shard, and a moved
-- parent's child owes its end to the shard the parent lives on (re-runnable:
-- this file runs outside a transaction, so the index is built without blocking the runs that
-- start and close meanwhile).
--
-- The runs migration 0101 keeps for a parent on another shard (end_owed_to_shard) are the oldest
-- ended runs while that shard is away, the case they are kept for, and the janitor's batch, its
-- remaining count and the sampler's retention lag walked executions_completed from the oldest,
-- judging each of them with a call of _retention_keeps: 40,000 owed runs made every batch of 500
-- read 91,500 runs and take 2 to 3 s while it held its locks. Those reads now go down this index,
-- which holds the ended runs that owe nothing. A failed CREATE INDEX CONCURRENTLY leaves an
-- INVALID index that IF NOT EXISTS would keep: it is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_retention;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_retention
ON harvest.executions (completed_at)
WHERE status <> 'RUNNING' AND end_owed_to_shard IS NULL;

-- executions_retention replaces executions_completed (every ended run by completion time): its
-- other reader, the sampler's forced closes (list_forced_closes), reads the owed runs through
-- executions_end_owed, so a run's close writes one of the two, not both.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_completed;

-- start_cross_shard_child takes the shard the parent lives on (p_parent_shard, the pump's
-- source), which the child's end is owed to: it marked the shard the parent's id names, and a
-- parent a rebalance moved keeps the id of the shard it was born on, so the operator's release
-- for the parent's retired shard missed its children, and one for its birth shard let go ends a
-- live parent waited for. The new one (an added parameter) is installed with the functions,
-- after the migrations; a call of an older pump (nine arguments) reads as it did.
DROP FUNCTION IF EXISTS harvest.start_cross_shard_child(uuid, uuid, integer, text, text, text, jsonb, text, text);
