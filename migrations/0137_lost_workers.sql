-- 0137: a lost worker's tasks come back (harvest.expire_lost_workers, run by the scanner): a
-- worker silent past its lost_after_secs (registered by the worker: default 6 x its heartbeat
-- interval) has its running activities fail that attempt with WorkerLost and its workflow tasks
-- go back to pending, instead of waiting for their leases (start_to_close: 5 minutes by
-- default). The worker row keeps the bound and the time it is lost at (each heartbeat moves it),
-- and a partial index finds the lost ones. harvest.register_worker takes p_lost_after_secs.
ALTER TABLE harvest.workers ADD COLUMN IF NOT EXISTS lost_after_secs double precision NOT NULL DEFAULT 60;
ALTER TABLE harvest.workers ADD COLUMN IF NOT EXISTS lost_at timestamptz;
-- The workers registered before this release: 6 x their interval, from their last heartbeat.
UPDATE harvest.workers SET
    lost_after_secs = 6 * heartbeat_interval_secs,
    lost_at = last_heartbeat_at + make_interval(secs => 6 * heartbeat_interval_secs)
WHERE status <> 'stopped' AND lost_at IS NULL;
CREATE INDEX IF NOT EXISTS workers_lost ON harvest.workers (lost_at) WHERE lost_at IS NOT NULL;
-- The old signature goes here; the new one is installed with the functions, after the
-- migrations.
DROP FUNCTION IF EXISTS harvest.register_worker(text, text[], text, integer, double precision, jsonb);
-- harvest.scan takes p_lost_workers (a worker leaves the sweep out until its own scans have
-- answered for its lost_after): its old signature goes too.
DROP FUNCTION IF EXISTS harvest.scan(integer);
