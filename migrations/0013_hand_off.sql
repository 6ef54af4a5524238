-- 0013: hand-off (functions/claim.sql). complete_workflow_task gained
-- p_hand_off_slots and returns the tasks it handed to the deciding worker; drop
-- the old signature so the function file creates the new one instead of an
-- overload. complete_activities (the worker's group commit) is new and needs
-- no schema change.

DROP FUNCTION IF EXISTS harvest.complete_workflow_task(bigint, bigint, bigint, jsonb, text, bigint, bigint);
