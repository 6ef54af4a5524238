-- 0099: a queued activity task carries its run's workflow name and id (re-runnable).
--
-- A claim answers each task with its run's workflow_name and workflow_id, and read them from
-- harvest.executions, one primary-key probe per claimed task. An activity needs nothing else
-- of its run (a workflow task also needs decided_by, decided_through and the events after it,
-- which change with every decision, so it still reads the run). Against a deep backlog those
-- probes land on the coldest pages a claim touches: a random row of a large table and its key
-- per claimed task (docs/performance.md, "The claim at 10M, attributed"). Both values are
-- fixed for the run's life, so the writes that queue an activity task (a decision's queued
-- activities, a dead letter's replay) copy them from the run row they already hold, and no
-- later write has to keep them true. NULL on workflow tasks, timers, handed activities (the
-- hand-off's insert stays as it was) and the activity tasks queued before this migration: a
-- claim of one of those reads the run as before. ADD COLUMN of a nullable column without a
-- default rewrites nothing.
ALTER TABLE harvest.tasks ADD COLUMN IF NOT EXISTS run_workflow_name text;
ALTER TABLE harvest.tasks ADD COLUMN IF NOT EXISTS run_workflow_id text;
