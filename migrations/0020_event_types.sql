-- 0020: events.event_type holds only the history vocabulary (docs/internals.md),
-- the same list as the runtime's harvest.runtime.commands.EVENT_TYPES
-- (tests/integration/test_vocabulary.py compares them). Adding the check scans
-- the event log once under the table's lock; every type the engine ever wrote
-- is in the list, so no existing row fails it.

ALTER TABLE harvest.events
ADD CONSTRAINT events_event_type_check CHECK (event_type IN (
    'ActivityCompleted', 'ActivityFailed', 'ActivityScheduled',
    'ChildWorkflowCompleted', 'ChildWorkflowFailed', 'ChildWorkflowStarted',
    'MarkerRecorded', 'MutexAcquired', 'SignalReceived',
    'TimerCancelled', 'TimerFired', 'TimerStarted',
    'UpdateAccepted', 'UpdateCompleted',
    'WorkflowCancelRequested', 'WorkflowCancelled', 'WorkflowCompleted',
    'WorkflowContinuedAsNew', 'WorkflowFailed', 'WorkflowResetFork',
    'WorkflowStarted', 'WorkflowTaskCompleted', 'WorkflowTerminated',
    'WorkflowTimedOut'
));
