-- harvest:no-transaction
-- 0129: the workflow list filters by workflow id (harvest.list_executions' p_workflow_id: GET
-- /workflows?workflow_id=, `harvest workflow list --workflow-id`), down a new index by workflow
-- id: executions_workflow_id_latest leads with the workflow name, so the list of one id's runs,
-- and a lookup by workflow id without its name (get_execution_by_workflow_id, GET
-- /workflows/current), read every run.
-- (Outside a transaction, re-runnable: runs keep being started meanwhile. A build that failed
-- half way leaves an invalid index, which the next run drops first.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_workflow_id;
CREATE INDEX CONCURRENTLY executions_workflow_id
ON harvest.executions (workflow_id);
-- The old signature of list_executions goes here; the new one is installed with the functions,
-- after the migrations.
DROP FUNCTION IF EXISTS harvest.list_executions(
    text, text, text[], timestamptz, timestamptz, integer, text, text, text
);
