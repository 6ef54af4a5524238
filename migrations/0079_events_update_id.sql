-- harvest:no-transaction
-- 0079: an update id's events by id and run (sql/events.sql, events_update_id), so that an
-- update id seen before is found across a continue-as-new chain with one probe per run
-- (functions/messages.sql). Built without blocking the event appends. A failed CREATE INDEX
-- CONCURRENTLY leaves an INVALID index behind, which IF NOT EXISTS would keep: dropping it
-- first makes a retry build it again.
DROP INDEX CONCURRENTLY IF EXISTS harvest.events_update_id;
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_update_id
ON harvest.events ((event_data ->> 'update_id'), execution_id)
WHERE event_type IN ('UpdateAccepted', 'UpdateCompleted');
