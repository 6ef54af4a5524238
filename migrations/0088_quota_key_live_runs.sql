-- harvest:no-transaction
-- 0088: a quota key's live runs are read without its history (re-runnable: this file runs
-- outside a transaction, so the index is built without blocking the writes of
-- harvest.executions).
--
-- A quota'd start counts its key's live runs (functions/flow_quotas.sql, quota_usage's
-- max_active_executions) and the janitor asks whether a live run has a key before it prunes the
-- key's flow_keys row (functions/retention.sql, _flow_key_in_use). Both read
-- executions_quota_key, which holds every kept run with a key: every finished run of the key
-- that retention had not yet deleted (a per-tenant key with a year of runs: all of them, on
-- every start of the tenant). The live runs now have their own index, as the concurrency keys'
-- do (executions_live_concurrency_key). executions_quota_key stays: the max_history_bytes sum
-- and the max_dead_letters join read every kept run of a key. The price: one more index entry
-- per quota'd start (and per resume of a paused run), none when a run finishes.
--
-- A failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it
-- is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_live_quota_key;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_live_quota_key
ON harvest.executions (quota_key)
WHERE status IN ('RUNNING', 'PAUSED') AND quota_key IS NOT NULL;
