-- harvest:no-transaction
-- 0094: a page of a run's direct children reads a page (re-runnable: this file runs outside a
-- transaction, so the index is built without blocking the writes of harvest.executions).
--
-- GET /workflows/{id}/children answers a page and the CLI reads every page, each shard asked
-- for page_size + 1 rows after the cursor's position; harvest.list_children read and sorted
-- every child of the run to answer them (a run with 100,000 children paid that per page).
-- harvest.list_children now takes the position and the page size (p_after_created_at,
-- p_after_id, p_limit) and reads the direct children in the list's order (created_at DESC, then
-- id) down executions_parent_created. The old signature goes here, the new one is installed
-- with the functions, after the migrations; a call with three arguments reads as before.
DROP FUNCTION IF EXISTS harvest.list_children(uuid, text, integer);

-- executions_parent_created replaces executions_parent (parent_id): every lookup of a run's
-- children by parent_id (the closes' cascade, the stack, the janitor) reads it as it read the
-- old one, so a child start still writes one entry of this index, not two. A failed CREATE
-- INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is dropped first,
-- and the old index goes only once the new one is built.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_parent_created;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_parent_created
ON harvest.executions (parent_id, created_at DESC, id)
WHERE parent_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_parent;

-- The audit log of one operation pages newest first by (at DESC, id DESC) (list_audit_log,
-- 0089), but audit_log_operation_at held (operation, at DESC): a page read and sorted the rows
-- of each instant it touched, a burst of one operation at one instant (a bulk action audited
-- per row) whole, for every page. audit_log_operation_newest holds the order; the old index
-- goes once it is built.
DROP INDEX CONCURRENTLY IF EXISTS harvest.audit_log_operation_newest;
CREATE INDEX CONCURRENTLY IF NOT EXISTS audit_log_operation_newest
ON harvest.audit_log (operation, at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS harvest.audit_log_operation_at;
