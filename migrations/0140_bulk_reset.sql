-- 0140: reset by filter (harvest.reset_workflows, `harvest workflow bulk-reset`, POST
-- /workflows/reset): the batch by filter resets each run it selects to a point named for them all
-- (before_failure, first_workflow_task), and a reset takes a FAILED run too (reset_workflow: it
-- stays FAILED, its fork goes on). _act_on_workflows takes the reset's point and signal reapply.
-- The old signature goes here; the new one is installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._act_on_workflows(
    text, text, text, text[], timestamptz, timestamptz, text, text, text, jsonb, text, integer, boolean, text, text,
    uuid[], text, boolean
);
