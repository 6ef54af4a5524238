-- 0053: the fan-out's seventh cut (docs/performance.md, "Fan-out row, seventh cut").
-- One index of a run's tasks instead of two: tasks_execution (execution_id) and the
-- partial unique tasks_activity_invocation (execution_id, seq) WHERE kind IN ('activity',
-- 'timer') become one unique tasks_execution_seq (execution_id, seq) over every row. A
-- workflow task's seq is NULL, so uniqueness asks nothing more of any row than before,
-- and every lookup of a run's tasks reads its prefix. Each task insert and each claim (a
-- non-HOT update) wrote an entry into both.
CREATE UNIQUE INDEX tasks_execution_seq
ON harvest.tasks (execution_id, seq);
DROP INDEX harvest.tasks_activity_invocation;
DROP INDEX harvest.tasks_execution;

-- A decision's queued activity is checked and described inline (_activity_command_ok,
-- _activity_scheduled_data); its step function is gone. (Installed with the functions,
-- after the migrations.)
DROP FUNCTION IF EXISTS harvest._decide_queue_activity(harvest.executions, integer, jsonb, integer);
