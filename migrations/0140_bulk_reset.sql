-- 0140: reset by filter (harvest.reset_workflows, `harvest workflow bulk-reset`, POST
-- /workflows/reset): the batch by filter resets each running run it selects to a point named for
-- them all (before_time with the bad deploy's time, first_workflow_task). _act_on_workflows takes
-- the reset's point, its time and signal reapply. The old signature goes here; the new one is
-- installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._act_on_workflows(
    text, text, text, text[], timestamptz, timestamptz, text, text, text, jsonb, text, integer, boolean, text, text,
    uuid[], text, boolean
);
