-- harvest:no-transaction
-- 0087: schema hygiene (each statement re-runnable: this file runs outside a transaction, so
-- its indexes are built without blocking the writes of their tables).
--
-- 1. The dead-letter listing reads newest first by (failed_at DESC, id DESC), the bulk actions
-- oldest first by (failed_at, id); the indexes held (failed_at DESC, id), so every page sorted
-- the rows of each failed_at it read, a burst at one instant whole. The new indexes hold the
-- listing's order (backwards, the bulk actions'). A failed CREATE INDEX CONCURRENTLY leaves an
-- INVALID index that IF NOT EXISTS would keep: each is dropped first, and the old one goes only
-- once the new one is built.
DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_newest;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_newest
ON harvest.dead_letters (failed_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_failed_at;

DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_activity_newest;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_activity_newest
ON harvest.dead_letters (activity_name, failed_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_activity;

DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_workflow_newest;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_workflow_newest
ON harvest.dead_letters (workflow_name, failed_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS harvest.dead_letters_workflow;
