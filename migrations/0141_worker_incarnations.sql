-- 0141: a worker restarted under the same worker_id (a StatefulSet pod's name, a fixed
-- --worker-id) gets its dead predecessor's tasks back at once instead of at their leases: each
-- process registers with an incarnation of its own, a register by another process takes back
-- what the id held (WorkerLost), and the predecessor's heartbeats, drain and stop no longer
-- touch its successor's row (harvest.register_worker, heartbeat_worker, begin_worker_drain,
-- stop_worker take p_incarnation).
ALTER TABLE harvest.workers ADD COLUMN IF NOT EXISTS incarnation text;
-- The old signatures go here; the new ones are installed with the functions, after the
-- migrations.
DROP FUNCTION IF EXISTS harvest.register_worker(text, text[], text, integer, double precision, jsonb, double precision);
DROP FUNCTION IF EXISTS harvest.heartbeat_worker(text);
DROP FUNCTION IF EXISTS harvest.begin_worker_drain(text);
DROP FUNCTION IF EXISTS harvest.stop_worker(text);
-- harvest.scan and expire_lost_workers take p_scanned_secs (how long the caller's scans have
-- answered: a worker whose lost_after is longer is left), in place of scan's p_lost_workers.
DROP FUNCTION IF EXISTS harvest.scan(integer, boolean);
DROP FUNCTION IF EXISTS harvest.expire_lost_workers(integer);
