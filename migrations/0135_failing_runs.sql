-- harvest:no-transaction
-- 0135: the workflow list filters the runs whose workflow task is failing (harvest.list_executions'
-- and count_executions' p_failing: GET /workflows?failing=true, `harvest workflow list --failing`)
-- and marks each run of a page with its failing task (the columns task_error_type, task_attempt,
-- task_failing_since), down a new partial index over the failing workflow tasks: a few rows,
-- where tasks_one_workflow_task holds every open run's.
-- The batch actions by filter (cancel_workflows, terminate_workflows, signal_workflows,
-- pause_workflows, resume_workflows) take p_failing as the list does.
-- harvest.count_versions takes p_history_before (`harvest version-usage --history-before`): the
-- active runs with no marker of a gate whose history began before a time, as version -1.
-- (Outside a transaction, re-runnable: tasks keep being written meanwhile. A build that failed
-- half way leaves an invalid index, which the next run drops first.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.tasks_workflow_failing;
CREATE INDEX CONCURRENTLY tasks_workflow_failing
ON harvest.tasks (execution_id)
WHERE kind = 'workflow' AND last_failure IS NOT NULL;
-- The old signatures go here; the new ones are installed with the functions, after the
-- migrations.
DROP FUNCTION IF EXISTS harvest.list_executions(
    text, text, text[], timestamptz, timestamptz, integer, text, text, text, text
);
DROP FUNCTION IF EXISTS harvest.count_executions(
    text, text, text, text[], timestamptz, timestamptz, text, integer, text
);
DROP FUNCTION IF EXISTS harvest._execution_filters(text, text, text[], timestamptz, timestamptz, text);
DROP FUNCTION IF EXISTS harvest.count_versions(text, integer, text, text);
DROP FUNCTION IF EXISTS harvest._act_on_workflows(
    text, text, text, text[], timestamptz, timestamptz, text, text, text, jsonb, text, integer, boolean, text, text,
    uuid[], text
);
DROP FUNCTION IF EXISTS harvest.cancel_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[], text
);
DROP FUNCTION IF EXISTS harvest.terminate_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[], text
);
DROP FUNCTION IF EXISTS harvest.pause_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[], text
);
DROP FUNCTION IF EXISTS harvest.resume_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[], text
);
DROP FUNCTION IF EXISTS harvest.signal_workflows(
    text, jsonb, text, text, text[], timestamptz, timestamptz, text, text, integer, boolean, text, text, uuid[], text,
    text
);
