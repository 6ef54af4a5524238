-- harvest:no-transaction
-- 0136: one index by workflow id where there were two (re-runnable: this file runs outside a
-- transaction, so the index is built without blocking the writes of harvest.executions).
--
-- executions_workflow_id_latest (workflow_name, workflow_id, created_at DESC) served the lookups
-- by both columns, executions_workflow_id (workflow_id, migration 0129) those by the id alone, and
-- every run's insert and close (its one update that is not HOT: it sets status) wrote an entry
-- into each. executions_workflow_id_runs (workflow_id, workflow_name, created_at DESC) serves
-- both: two index entries, two WAL records and an index opened by every write of a run's row
-- fewer (docs/performance.md, "Index entries per run, counted"). A failed CREATE INDEX
-- CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_workflow_id_runs;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_workflow_id_runs
ON harvest.executions (workflow_id, workflow_name, created_at DESC);
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_workflow_id_latest;
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_workflow_id;
