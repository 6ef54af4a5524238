-- Who decided a run last and through which event: a claim by that same worker
-- carries the newer events, so its sticky cache needs no history read.

ALTER TABLE harvest.executions
ADD COLUMN decided_by text,
ADD COLUMN decided_through bigint;
