-- harvest:no-transaction
-- 0107: an index nothing reads, and three internal functions whose arguments changed.
--
-- executions_quota_key, (quota_key) over every kept run with a key, lost its last reader when
-- the quotas came to read live runs only (migration 0088: executions_live_quota_key), ended
-- runs' bytes from harvest.quota_ended_bytes (0103) and dead letters by their own key (0106).
-- Every quota'd start still wrote an entry in it, and every finished run kept one until
-- retention deleted it. (Outside a transaction, re-runnable: runs keep being written meanwhile.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_quota_key;

-- The metrics sampler counts the keys in flight and the other keys' runs on one pass
-- (functions/flow_concurrency.sql, _count_concurrency_keys' p_other_runs; functions/metrics.sql),
-- and the live keyed runs are read for the keys asked for (_live_keyed_runs' p_keys): the
-- functions' step, which `harvest migrate run` applies next, creates the new signatures (until
-- it commits, the metrics sample and the status view fail: dropped by name, not replaced).
DROP FUNCTION IF EXISTS harvest._busiest_concurrency_keys(text[], integer);
DROP FUNCTION IF EXISTS harvest._count_concurrency_keys(text[], text);
DROP FUNCTION IF EXISTS harvest._live_keyed_runs();
