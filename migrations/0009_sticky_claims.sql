-- 0009: a workflow task claimed by the worker that decided the run last comes
-- with the events it has not seen, saving a history read per workflow task.

ALTER TABLE harvest.executions
ADD COLUMN decided_by text,
ADD COLUMN decided_through bigint;

-- claim_tasks returns two more columns (new_events, new_events_after).
DROP FUNCTION IF EXISTS harvest.claim_tasks(text, text[], integer, double precision);
