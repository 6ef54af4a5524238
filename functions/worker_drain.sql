-- A draining worker asks when its drain must be done: the deadline an operator
-- gave harvest.drain_worker, and the seconds left by the database clock
-- (negative once it has passed). No row when the worker is unknown; NULLs when
-- no deadline was given. The worker stops at the deadline and releases what is
-- still in flight (harvest_py/harvest/worker/worker.py).
CREATE OR REPLACE FUNCTION harvest.worker_drain_deadline(p_worker_id text)
RETURNS TABLE (drain_deadline timestamptz, remaining_secs double precision)
LANGUAGE sql STABLE
AS $$
    SELECT w.drain_deadline,
           extract(epoch FROM w.drain_deadline - harvest.now())::double precision
    FROM harvest.workers AS w
    WHERE w.id = p_worker_id;
$$;
