-- 0061: the hand-off batching (docs/performance.md, "Hand-off batching, again"; first
-- built in "Fan-out row, eighth cut"). A decision's handed activities are gathered and
-- inserted by one statement (_hand_activities), as its queued ones are
-- (_queue_activities); the step function that inserted a handed activity alone is gone.
-- (Installed with the functions, after the migrations.)
DROP FUNCTION IF EXISTS harvest._decide_schedule_activity(
    harvest.executions, integer, jsonb, text, timestamptz, integer, boolean, text[]
);
