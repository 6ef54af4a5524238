-- 0104: a start that names no queue reads the queues its workflow is registered on
-- (functions/start.sql, _start_queue: the CLI, a Client starting by name, psql, a schedule made
-- over SQL). The primary key leads with the queue, so that read scanned every registration:
-- 340 us with 3,000 of them, on each such start. By name it is one probe (9 us). The table is
-- small and written when a worker boots, so the index is built in the migration's transaction.
CREATE INDEX IF NOT EXISTS registered_workflows_by_name
ON harvest.registered_workflows (workflow_name);
