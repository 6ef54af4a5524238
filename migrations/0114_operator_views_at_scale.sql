-- harvest:no-transaction
-- 0114: an operator's views over months of history (re-runnable: this file runs outside a
-- transaction, so the index is built without blocking the writes of harvest.executions).
--
-- The workflow list of one state (GET /workflows?state=RUNNING, the dashboard's status chips,
-- `harvest workflow list --state`) pages by (created_at, id), newest first by default, and
-- executions_status_created held (status, created_at DESC, id): neither direction of it is the
-- list's (created_at DESC, id DESC), so a page read down executions_created through the runs of
-- every other state (1.2 s for a page of RUNNING runs half way down 2M runs).
-- executions_status_listed holds both columns ascending; it replaces the old one, which every
-- other reader by status reads the same way, so a run's writes keep one index by status. A
-- failed CREATE INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is
-- dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_status_listed;
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_status_listed
ON harvest.executions (status, created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS harvest.executions_status_created;
-- harvest.count_executions takes p_limit (count at most that many runs a status, the dashboard's
-- status chips: an exact count read every run on each view) and answers capped; the old
-- signature goes here, the new one is installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.count_executions(text, text, text, text[], timestamptz, timestamptz, text);
