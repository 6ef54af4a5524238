-- 0044: cheaper rows (docs/performance.md, "where the SQL path's time goes"). The closed
-- lists of events.event_type, executions.status and parent_close_policy, tasks.kind and
-- status, and the forwarding pointer's rule (executions_migrated_to_shard_check), move
-- from IN lists in table CHECKs to domains the same-named table CHECKs cast to.
-- PostgreSQL reads a table CHECK's expression back from its stored text for every INSERT
-- or UPDATE statement on the table, a domain's once per session; the rules, the
-- constraint names and the SQLSTATE (23514) of a violation stay. The columns stay text.
-- Each ADD CONSTRAINT checks the table's rows once (a scan, no rewrite, no index rebuilt).
CREATE DOMAIN harvest.event_type AS text
CONSTRAINT events_event_type_check CHECK (value IN (
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

CREATE DOMAIN harvest.execution_status AS text
CONSTRAINT executions_status_check CHECK (value IN (
    'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
    'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED', 'PAUSED'
));

CREATE DOMAIN harvest.parent_close_policy AS text
CONSTRAINT executions_parent_close_policy_check CHECK (
    value IN ('terminate', 'request_cancel', 'abandon')
);

CREATE DOMAIN harvest.migrated_status AS text
CONSTRAINT executions_migrated_to_shard_check CHECK (value IN ('MIGRATING', 'MIGRATED'));

CREATE DOMAIN harvest.shard_number AS integer
CONSTRAINT executions_migrated_to_shard_check CHECK (value BETWEEN 0 AND 65535);

CREATE DOMAIN harvest.task_kind AS text
CONSTRAINT tasks_kind_check CHECK (value IN ('workflow', 'activity', 'timer'));

CREATE DOMAIN harvest.task_status AS text
CONSTRAINT tasks_status_check CHECK (value IN ('pending', 'running', 'paused'));

ALTER TABLE harvest.events
DROP CONSTRAINT events_event_type_check,
ADD CONSTRAINT events_event_type_check CHECK ((event_type::harvest.event_type) IS NOT NULL);

ALTER TABLE harvest.executions
DROP CONSTRAINT executions_status_check,
ADD CONSTRAINT executions_status_check CHECK ((status::harvest.execution_status) IS NOT NULL),
DROP CONSTRAINT executions_parent_close_policy_check,
ADD CONSTRAINT executions_parent_close_policy_check CHECK (
    (parent_close_policy::harvest.parent_close_policy) IS NOT NULL
),
DROP CONSTRAINT executions_migrated_to_shard_check,
ADD CONSTRAINT executions_migrated_to_shard_check CHECK (
    (migrated_to_shard::harvest.shard_number) IS NULL
    OR (status::harvest.migrated_status) IS NOT NULL
);

ALTER TABLE harvest.tasks
DROP CONSTRAINT tasks_kind_check,
ADD CONSTRAINT tasks_kind_check CHECK ((kind::harvest.task_kind) IS NOT NULL),
DROP CONSTRAINT tasks_status_check,
ADD CONSTRAINT tasks_status_check CHECK ((status::harvest.task_status) IS NOT NULL);
