-- 0076: harvest.set_worker_sleeping answers whether the producers that checked the worker's
-- queues without seeing its mark have committed (a boolean where it returned nothing), so a
-- worker going to sleep looks for their work once they have (functions/workers.sql,
-- docs/internals.md "Wake-ups"). The old signature goes here; the new one is installed with
-- the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.set_worker_sleeping(text, boolean);
