-- 0024: signalling and cancelling another workflow from workflow code
-- (ctx.signal_external_workflow, ctx.cancel_external_workflow). Six event types
-- join the history vocabulary; relays gain the kinds external_signal and
-- external_cancel, a source (where the outcome goes back), a target by business
-- key, and the columns a cross-shard pump claims by; relay_receipts make a
-- relay applied for another shard idempotent; engine_settings.cross_shard_relays
-- says whether another shard may hold a relay's target (docs/internals.md,
-- "Relays across shards"). Every existing row satisfies the new checks.

ALTER TABLE harvest.events DROP CONSTRAINT events_event_type_check;
ALTER TABLE harvest.events
ADD CONSTRAINT events_event_type_check CHECK (event_type IN (
    'ActivityCompleted', 'ActivityFailed', 'ActivityScheduled',
    'ChildWorkflowCompleted', 'ChildWorkflowFailed', 'ChildWorkflowStarted',
    'ExternalCancelDelivered', 'ExternalCancelFailed', 'ExternalCancelRequested',
    'ExternalSignalDelivered', 'ExternalSignalFailed', 'ExternalSignalRequested',
    'MarkerRecorded', 'MutexAcquired', 'SignalReceived',
    'TimerCancelled', 'TimerFired', 'TimerStarted',
    'UpdateAccepted', 'UpdateCompleted',
    'WorkflowCancelRequested', 'WorkflowCancelled', 'WorkflowCompleted',
    'WorkflowContinuedAsNew', 'WorkflowFailed', 'WorkflowResetFork',
    'WorkflowStarted', 'WorkflowTaskCompleted', 'WorkflowTerminated',
    'WorkflowTimedOut'
));

ALTER TABLE harvest.relays ALTER COLUMN target_execution_id DROP NOT NULL;
ALTER TABLE harvest.relays
ADD COLUMN source_execution_id uuid,
ADD COLUMN source_seq integer,
ADD COLUMN target_workflow_id text,
ADD COLUMN target_workflow_name text,
ADD COLUMN target_shard integer,
ADD COLUMN remote boolean NOT NULL DEFAULT false,
ADD COLUMN claimed_until timestamptz,
ADD COLUMN attempts integer NOT NULL DEFAULT 0,
ADD COLUMN last_error text;
ALTER TABLE harvest.relays DROP CONSTRAINT relays_kind_check;
ALTER TABLE harvest.relays
ADD CONSTRAINT relays_kind_check CHECK (
    kind IN ('child_closed', 'parent_closed', 'external_signal', 'external_cancel')
),
ADD CONSTRAINT relays_target_check CHECK (
    target_execution_id IS NOT NULL
    OR (kind IN ('external_signal', 'external_cancel') AND target_workflow_id IS NOT NULL)
),
ADD CONSTRAINT relays_source_check CHECK (
    kind NOT IN ('external_signal', 'external_cancel')
    OR (source_execution_id IS NOT NULL AND source_seq IS NOT NULL)
),
ADD CONSTRAINT relays_target_shard_range CHECK (target_shard BETWEEN 0 AND 65535);

CREATE INDEX relays_remote ON harvest.relays (id) WHERE remote;

CREATE TABLE harvest.relay_receipts (
    source_shard integer NOT NULL,
    relay_id bigint NOT NULL,
    outcome text NOT NULL,
    target_execution_id uuid,
    message text,
    received_at timestamptz NOT NULL,
    CONSTRAINT relay_receipts_pkey PRIMARY KEY (source_shard, relay_id),
    CONSTRAINT relay_receipts_outcome_check CHECK (
        outcome IN ('delivered', 'already_requested')
    )
);

ALTER TABLE harvest.engine_settings ADD COLUMN cross_shard_relays boolean NOT NULL DEFAULT false;
