-- 0021: the names of CONTRIBUTING.md "Names" (issue 13). The queue that routes
-- work is `queue`, never `task_queue`: two columns are renamed (their indexes
-- and constraints follow the column; the NOT NULL constraint that PostgreSQL 18
-- names after the column is renamed too, as a fresh install names it).
-- Functions are renamed to the verb-first scheme, and parameters to p_queue,
-- p_status and p_operator_id: functions/ re-creates them under the new names,
-- so the old signatures are dropped here. CREATE OR REPLACE cannot rename a
-- parameter or change the returned columns, and a renamed function would
-- otherwise stay behind in an upgraded database. Pre-1.0: no wrappers keep the
-- old names (CHANGELOG.md lists every rename).

ALTER TABLE harvest.executions RENAME COLUMN task_queue TO queue;
ALTER TABLE harvest.pending_starts RENAME COLUMN task_queue TO queue;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conname = 'executions_task_queue_not_null'
                 AND conrelid = 'harvest.executions'::regclass) THEN
        ALTER TABLE harvest.executions
        RENAME CONSTRAINT executions_task_queue_not_null TO executions_queue_not_null;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conname = 'pending_starts_task_queue_not_null'
                 AND conrelid = 'harvest.pending_starts'::regclass) THEN
        ALTER TABLE harvest.pending_starts
        RENAME CONSTRAINT pending_starts_task_queue_not_null TO pending_starts_queue_not_null;
    END IF;
END;
$$;

-- Renamed functions (old name -> new name in CHANGELOG.md).
DROP FUNCTION IF EXISTS harvest.worker_heartbeat(text);
DROP FUNCTION IF EXISTS harvest.worker_sleep(text, boolean);
DROP FUNCTION IF EXISTS harvest.worker_drain_deadline(text);
DROP FUNCTION IF EXISTS harvest.worker_health();
DROP FUNCTION IF EXISTS harvest.drain_preview(text, text);
DROP FUNCTION IF EXISTS harvest.mutex_tick(integer);
DROP FUNCTION IF EXISTS harvest.mutex_status(text);
DROP FUNCTION IF EXISTS harvest.concurrency_status(text);
DROP FUNCTION IF EXISTS harvest.pending_starts_status(text);
DROP FUNCTION IF EXISTS harvest.retention_status();
DROP FUNCTION IF EXISTS harvest.workflow_stack(uuid);
DROP FUNCTION IF EXISTS harvest.aggregate_dead_letters(text);
DROP FUNCTION IF EXISTS harvest.usage_report(timestamptz, timestamptz, text, interval);
DROP FUNCTION IF EXISTS harvest.version_usage(text, integer, text);
DROP FUNCTION IF EXISTS harvest.bulk_replay_dead_letters(
    text, text, timestamptz, timestamptz, integer, boolean, text
);
DROP FUNCTION IF EXISTS harvest.bulk_discard_dead_letters(
    text, text, timestamptz, timestamptz, integer, boolean, text
);
DROP FUNCTION IF EXISTS harvest.claim_queries(text, text[], integer, double precision);
DROP FUNCTION IF EXISTS harvest.stop_waiting(uuid);

-- Renamed parameters: p_task_queue -> p_queue.
DROP FUNCTION IF EXISTS harvest.start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, uuid, integer,
    double precision, double precision, boolean
);
DROP FUNCTION IF EXISTS harvest.signal_with_start(text, text, text, jsonb, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS harvest.update_with_start(
    text, text, text, jsonb, jsonb, text, text, double precision, jsonb
);
DROP FUNCTION IF EXISTS harvest._start_check_arguments(text, jsonb, text, text, jsonb, text, text);
DROP FUNCTION IF EXISTS harvest._start_check_registered(text, text, boolean);
DROP FUNCTION IF EXISTS harvest._start_defer(
    text, jsonb, jsonb, text, text, text, text, jsonb, integer, double precision, double precision
);
DROP FUNCTION IF EXISTS harvest._start_gate(
    text, jsonb, jsonb, text, text, text, jsonb, integer, double precision, double precision
);
DROP FUNCTION IF EXISTS harvest._start_insert(
    text, jsonb, text, text, jsonb, integer, uuid, integer, double precision, double precision,
    jsonb, text, text
);

-- p_state -> p_status, and the returned id and task_queue -> execution_id and queue.
DROP FUNCTION IF EXISTS harvest.list_executions(
    text, text, text[], timestamptz, timestamptz, integer, text, text
);

-- p_operator -> p_operator_id.
DROP FUNCTION IF EXISTS harvest.drain_worker(text, timestamptz, text);
DROP FUNCTION IF EXISTS harvest.set_retention(interval, integer, text);
DROP FUNCTION IF EXISTS harvest.run_retention(interval, integer, text);
DROP FUNCTION IF EXISTS harvest.set_worker_retention(interval, text);
DROP FUNCTION IF EXISTS harvest.prune_workers(interval, text);
DROP FUNCTION IF EXISTS harvest._bulk_dead_letters(
    text, text, text, timestamptz, timestamptz, integer, boolean, text
);
DROP FUNCTION IF EXISTS harvest._audit(text, text, text, jsonb);

-- Every functions/ file that defined a dropped function is applied again after
-- this migration, whatever its recorded checksum says.
DELETE FROM harvest.function_files
WHERE file_name IN (
    'audit.sql', 'dead_letters.sql', 'concurrency.sql', 'executions.sql', 'messages.sql', 'mutex.sql',
    'reset.sql', 'retention.sql', 'signals.sql', 'start.sql', 'throttle.sql', 'usage.sql',
    'workers.sql'
);
