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

-- 2. The live runs' concurrency keys lead with the key: the janitor's probe of a key
-- (retention.sql, _flow_key_in_use) names no workflow, and read every live keyed run's entry
-- (one search per workflow name on PostgreSQL 18). _supersede and list_concurrency_keys give
-- both columns, in either order. The same entries as before: no cost per insert.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_live_concurrency_key;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_live_concurrency_key
ON harvest.executions (concurrency_key, workflow_name, created_at)
WHERE status IN ('RUNNING', 'PAUSED') AND concurrency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_concurrency_key;

-- 3. harvest.flow_keys loses admitted: a count of the starts since the row was (re)made that
-- nothing read (the janitor resets it by pruning the row). A start still updates the key's row
-- (the update locks it, refuses a stale snapshot with 40001 and stamps the xmin the janitor
-- reads), so _take_flow_key and _lock_flow_key became the same statement: _lock_flow_key goes,
-- its one caller (decide.sql, _lock_flow_keys_of) takes the row with _take_flow_key once the
-- functions are installed. _take_flow_key is replaced here, as functions/flow_quotas.sql
-- defines it, before the column goes, so no start finds the column missing meanwhile.
CREATE OR REPLACE FUNCTION harvest._take_flow_key(p_kind text, p_key text)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO harvest.flow_keys AS f (kind, key) VALUES (p_kind, p_key)
    ON CONFLICT (kind, key) DO UPDATE SET key = f.key;
$$;

DROP FUNCTION IF EXISTS harvest._lock_flow_key(text, text);

ALTER TABLE harvest.flow_keys DROP COLUMN IF EXISTS admitted;
