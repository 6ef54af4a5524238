-- 0086: a result wait that ends drops its marks by waiter id (stop_waiting_for_result,
-- functions/executions.sql), which no index led with since 0083 made the key
-- (execution_id, waiter_id, login): every ended wait scanned every client's marks.
CREATE INDEX IF NOT EXISTS result_waiters_waiter
ON harvest.result_waiters (waiter_id);
