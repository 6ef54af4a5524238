-- harvest:no-transaction
-- 0118: the cross-shard pump takes the children that are due in due order, from an index
-- (re-runnable: this file runs outside a transaction, so the index is built without blocking
-- the writes of harvest.cross_shard_children).
--
-- claim_cross_shard_children took the due rows oldest first (created_at) with no index for it:
-- every claim (once per scanner tick on each worker of a sharded deployment) read the whole
-- table and sorted every due row (24 ms of CPU at 100,000 children in flight). A running child is
-- leased for the pump's poll (1 s) and due again after it, so the oldest rows were due again by
-- the next tick: past the claim's limit (100) of running children, the newer ones were never
-- read, and a child that ended waited for every older child to end before its end reached its
-- parent. The claim now takes the rows by when they are due (a row with no next_attempt_at, new,
-- started or delivered, at once; then the end of each lease or backoff), oldest first among
-- equals, read in that order from cross_shard_children_due: a child polled goes behind the others.
-- A failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is
-- dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.cross_shard_children_due;
CREATE INDEX CONCURRENTLY IF NOT EXISTS cross_shard_children_due
ON harvest.cross_shard_children ((coalesce(next_attempt_at, '-infinity'::timestamptz)), created_at, child_execution_id);
