-- harvest:no-transaction
-- 0138: the held-back starts page by a keyset cursor (harvest.list_pending_starts: oldest first,
-- p_limit after p_after_created_at and p_after_id, with each start's input size): an index
-- answers the order, and one for a workflow's starts. Built without blocking the admissions'
-- writes (a throttle's backlog is every start it holds back); this file runs outside a
-- transaction, so each statement is safe to run again: a failed CREATE INDEX CONCURRENTLY
-- leaves an INVALID index that IF NOT EXISTS would keep, so it is dropped first. The old
-- signature goes here; the new one is installed with the functions, after the migrations.
DROP INDEX CONCURRENTLY IF EXISTS harvest.pending_starts_listed;
CREATE INDEX CONCURRENTLY IF NOT EXISTS pending_starts_listed
ON harvest.pending_starts (created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS harvest.pending_starts_workflow_listed;
CREATE INDEX CONCURRENTLY IF NOT EXISTS pending_starts_workflow_listed
ON harvest.pending_starts (workflow_name, created_at, id);
DROP FUNCTION IF EXISTS harvest.list_pending_starts(text);
