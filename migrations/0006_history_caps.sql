-- 0006: history size tracking for the hard caps (and the byte measure quotas use).
-- history_bytes is the running sum of the events' JSON text bytes (harvest._event_bytes).

ALTER TABLE harvest.executions
ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;

UPDATE harvest.executions AS e
SET history_bytes = coalesce((
    SELECT sum(octet_length(ev.event_data::text)) FROM harvest.events AS ev
    WHERE ev.execution_id = e.id
), 0);

-- complete_workflow_task gained the cap parameters; drop the old signature so the
-- re-applied functions/decide.sql leaves no ambiguous overload behind.
DROP FUNCTION IF EXISTS harvest.complete_workflow_task(bigint, bigint, bigint, jsonb, text);
