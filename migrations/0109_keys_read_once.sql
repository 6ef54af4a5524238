-- 0109: three internal functions whose arguments changed.

-- The metrics sampler counts the keys in flight and the other keys' runs on one pass
-- (functions/flow_concurrency.sql, _count_concurrency_keys' p_other_runs; functions/metrics.sql),
-- and the live keyed runs are read for the keys asked for (_live_keyed_runs' p_keys): the
-- functions' step, which `harvest migrate run` applies next, creates the new signatures (until
-- it commits, the metrics sample and the status view fail: dropped by name, not replaced).
DROP FUNCTION IF EXISTS harvest._busiest_concurrency_keys(text[], integer);
DROP FUNCTION IF EXISTS harvest._count_concurrency_keys(text[], text);
DROP FUNCTION IF EXISTS harvest._live_keyed_runs();
