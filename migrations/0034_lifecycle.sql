-- 0034: pause and resume (functions/lifecycle.sql, docs/lifecycle.md). A run may be
-- PAUSED: it keeps its business key and its flow-control holdings (workflow slot,
-- mutexes), counts for supersede and quotas, and none of its tasks is claimed: its
-- pending tasks (workflow, activity, timer) wait in the task status 'paused'. Two
-- bookkeeping events record the transitions. And the start throttle's pacing override
-- (at the end).

ALTER TABLE harvest.executions DROP CONSTRAINT executions_status_check;
ALTER TABLE harvest.executions ADD CONSTRAINT executions_status_check CHECK (status IN (
    'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
    'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED', 'PAUSED'
));

DROP INDEX harvest.executions_active_workflow_id;
CREATE UNIQUE INDEX executions_active_workflow_id
ON harvest.executions (workflow_name, workflow_id)
WHERE status IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED');

DROP INDEX harvest.executions_concurrency_key;
CREATE INDEX executions_concurrency_key
ON harvest.executions (workflow_name, concurrency_key, created_at)
WHERE status IN ('RUNNING', 'PAUSED') AND concurrency_key IS NOT NULL;

ALTER TABLE harvest.tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE harvest.tasks ADD CONSTRAINT tasks_status_check CHECK (status IN ('pending', 'running', 'paused'));

DROP INDEX harvest.tasks_timers_due;
CREATE INDEX tasks_timers_due
ON harvest.tasks (due_at)
WHERE kind = 'timer' AND status = 'pending';

ALTER TABLE harvest.events DROP CONSTRAINT events_event_type_check;
ALTER TABLE harvest.events ADD CONSTRAINT events_event_type_check CHECK (event_type IN (
    'ActivityCompleted', 'ActivityFailed', 'ActivityScheduled',
    'ChildWorkflowCompleted', 'ChildWorkflowFailed', 'ChildWorkflowStarted',
    'ExternalCancelDelivered', 'ExternalCancelFailed', 'ExternalCancelRequested',
    'ExternalSignalDelivered', 'ExternalSignalFailed', 'ExternalSignalRequested',
    'MarkerRecorded', 'MutexAcquired', 'SignalReceived',
    'TimerCancelled', 'TimerFired', 'TimerStarted',
    'UpdateAccepted', 'UpdateCompleted',
    'WorkflowCancelRequested', 'WorkflowCancelled', 'WorkflowCompleted',
    'WorkflowContinuedAsNew', 'WorkflowFailed', 'WorkflowPaused', 'WorkflowResetFork',
    'WorkflowResumed', 'WorkflowStarted', 'WorkflowTaskCompleted', 'WorkflowTerminated',
    'WorkflowTimedOut'
));

-- Pausing is not leaving: a run gives back its slot and mutexes only when it ends.
DROP TRIGGER executions_flow_release ON harvest.executions;
CREATE TRIGGER executions_flow_release
AFTER UPDATE OF status ON harvest.executions
FOR EACH ROW
WHEN (old.status IN ('RUNNING', 'PAUSED') AND new.status NOT IN ('RUNNING', 'PAUSED'))
EXECUTE FUNCTION harvest._executions_flow_release();

-- The start throttle's pacing override (functions/flow_throttle.sql): a TTL'd rate
-- laid over a throttle declared without a key, as rate_limit_buckets has.
ALTER TABLE harvest.start_throttle_buckets
ADD COLUMN override_rps double precision,
ADD COLUMN override_burst double precision,
ADD COLUMN override_expires_at timestamptz;

-- count_versions takes a workflow_name filter (the spec's version-usage report): drop
-- the old signature so functions/executions.sql creates the new one, not an overload.
DROP FUNCTION IF EXISTS harvest.count_versions(text, integer, text);
