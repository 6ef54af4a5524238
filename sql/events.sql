-- The append-only event log of each execution (functions/core.sql _append_event).

-- The history vocabulary (docs/internals.md); harvest.runtime.commands.EVENT_TYPES
-- lists the same types (tests/integration/test_vocabulary.py compares them). A domain,
-- not an IN list on the table: a table CHECK's expression is read back from its stored
-- text by every INSERT or UPDATE statement (32 strings, on every event append), a
-- domain's once per session (docs/performance.md, "where the SQL path's time goes").
-- The column stays text; the table's CHECK casts to the domain, so a bad type fails with
-- the same SQLSTATE (23514) and the same constraint name as before.
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

CREATE TABLE harvest.events (
    execution_id uuid NOT NULL,
    event_id bigint NOT NULL,
    event_type text NOT NULL,
    event_data jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    -- The event's place in this database's one stream of every event (0032): the cursor
    -- of GET /stream and `harvest events tail` (docs/event-streams.md). Assigned at insert,
    -- so it orders events by insert, not commit; the stream reader waits out the gaps of
    -- transactions still in flight (harvest.get_event_horizon).
    global_id bigint GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT events_pkey PRIMARY KEY (execution_id, event_id),
    CONSTRAINT events_event_type_check CHECK ((event_type::harvest.event_type) IS NOT NULL),
    CONSTRAINT events_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

CREATE UNIQUE INDEX events_global_id
ON harvest.events (global_id);

-- An update id's events (UpdateAccepted, UpdateCompleted) by id and run: asking for an update
-- finds an id seen before in its run, or in the runs that run continued from, with one probe
-- per run instead of a read of each run's whole history (functions/messages.sql,
-- _update_seen; migration 0079).
CREATE INDEX events_update_id
ON harvest.events ((event_data ->> 'update_id'), execution_id)
WHERE event_type IN ('UpdateAccepted', 'UpdateCompleted');

-- A change's version markers by change id and run: harvest.count_versions (`harvest
-- version-usage`) finds the runs that recorded a change, or (--history-before) the live runs
-- that did not, down a few rows instead of every event kept (6 s over 20M events; migration
-- 0139).
CREATE INDEX events_version_markers
ON harvest.events ((event_data #>> '{value,change_id}'), execution_id)
WHERE event_type = 'MarkerRecorded' AND event_data ->> 'kind' = 'version';
