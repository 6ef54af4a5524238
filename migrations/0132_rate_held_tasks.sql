-- harvest:no-transaction
-- 0132: the tasks a rate limit holds back, found by an override (re-runnable: this file runs
-- outside a transaction, so the index is built without blocking the writes of harvest.tasks).
--
-- A rate-limit refusal stamped only due_at, so an override (or its clear) could not tell a task
-- waiting for its bucket's token from one waiting out a retry's backoff, and left them all at the
-- rate of their refusal (functions/flow_rate_limits.sql, _repace_rate_bucket). The refusal now
-- writes the same value to rate_due_at, in the UPDATE it already made; the partial index holds
-- a task only while the two are equal, so no insert, claim or retry writes an entry to it. The
-- column has no default: adding it rewrites nothing. An override moves at most 10,000 tasks; a
-- bucket with more left is given the number the scanner may still move (rate_limit_buckets.
-- repace_left, NULL: no rewrite either) and the scanner goes on (_repace_rate_buckets), found by
-- a partial index. (repace_pending, a flag an earlier draft of this file added, is dropped: no
-- release had it.) A
-- failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is
-- dropped first.
ALTER TABLE harvest.tasks ADD COLUMN IF NOT EXISTS rate_due_at timestamptz;
DROP INDEX CONCURRENTLY IF EXISTS harvest.tasks_rate_held;
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_rate_held
ON harvest.tasks (rate_key, due_at, id)
WHERE status = 'pending' AND rate_due_at = due_at;
ALTER TABLE harvest.rate_limit_buckets DROP COLUMN IF EXISTS repace_pending;
ALTER TABLE harvest.rate_limit_buckets ADD COLUMN IF NOT EXISTS repace_left integer;
DROP INDEX CONCURRENTLY IF EXISTS harvest.rate_limit_buckets_repace;
CREATE INDEX CONCURRENTLY IF NOT EXISTS rate_limit_buckets_repace
ON harvest.rate_limit_buckets (bucket_key)
WHERE repace_left IS NOT NULL;
