-- harvest:no-transaction
-- 0101: a cross-shard child's end is kept on its shard until its parent has it (issue #1263;
-- re-runnable: this file runs outside a transaction, so the index is built without blocking the
-- runs that start and close meanwhile).
--
-- The child's end is pulled by its parent's pump from the child's shard, and that shard's
-- retention deleted an ended child past its window whatever its parent had read: a parent's
-- shard unreachable for longer than the window (or a short window) left the parent waiting for
-- ever on a child that had completed. A run now carries end_owed_to_shard, the shard of a
-- parent on another shard that has not taken its end yet (start_cross_shard_child sets it, a
-- continue-as-new hands it to the successor, the pump clears it once the parent's history has
-- the end or the parent's close policy reached the child), and retention keeps the run while it
-- is set. The partial index holds only those runs: an operator's release of the ends owed to a
-- retired shard (release_owed_child_ends) and retention status count them through it.
ALTER TABLE harvest.executions ADD COLUMN IF NOT EXISTS end_owed_to_shard integer;

-- A failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_end_owed;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_end_owed
ON harvest.executions (end_owed_to_shard, completed_at)
WHERE end_owed_to_shard IS NOT NULL;

-- The parent's row of a child whose end its history has, until the child's shard was told
-- (clear_owed_child_end): a new state, delivered.
ALTER TABLE harvest.cross_shard_children DROP CONSTRAINT IF EXISTS cross_shard_children_status_check;
ALTER TABLE harvest.cross_shard_children ADD CONSTRAINT cross_shard_children_status_check
CHECK (status IN ('starting', 'running', 'delivered'));

-- _retention_keeps judges the run's owed end too (a new argument); the new one is installed with
-- the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._retention_keeps(uuid, text, jsonb);
