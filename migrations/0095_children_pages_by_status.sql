-- harvest:no-transaction
-- 0095: a page of a run's children of one status reads a page (re-runnable: this file runs
-- outside a transaction, so the index is built without blocking the writes of
-- harvest.executions).
--
-- GET /workflows/{id}/children?status=... and harvest.list_children with a status read down
-- executions_parent_created and dropped the children of other statuses, so a page of a rare
-- status (the failed few of 100,000 children) read through all of them, each page.
-- executions_parent_status_created holds a run's children by status in the list's order
-- (created_at DESC, then id). A failed CREATE INDEX CONCURRENTLY leaves an INVALID index that
-- IF NOT EXISTS would keep: it is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_parent_status_created;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_parent_status_created
ON harvest.executions (parent_id, status, created_at DESC, id)
WHERE parent_id IS NOT NULL;
