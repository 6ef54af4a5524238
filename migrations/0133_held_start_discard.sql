-- 0133: an operator discards a start a gate holds back (harvest.discard_pending_start,
-- harvest.discard_pending_starts, functions/flow_throttle.sql), found by the id
-- list_pending_starts now answers; the workflow count and the batch actions by filter take a
-- workflow id (count_executions, cancel/terminate/signal/pause/resume_workflows: p_workflow_id,
-- down executions_workflow_id, migration 0129). The old signatures go here; the new ones are
-- installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.list_pending_starts(text);
DROP FUNCTION IF EXISTS harvest._execution_filters(text, text, text[], timestamptz, timestamptz);
DROP FUNCTION IF EXISTS harvest.count_executions(text, text, text, text[], timestamptz, timestamptz, text, integer);
DROP FUNCTION IF EXISTS harvest._act_on_workflows(
    text, text, text, text[], timestamptz, timestamptz, text, text, text, jsonb, text, integer, boolean, text, text,
    uuid[]
);
DROP FUNCTION IF EXISTS harvest.cancel_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[]
);
DROP FUNCTION IF EXISTS harvest.terminate_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[]
);
DROP FUNCTION IF EXISTS harvest.pause_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[]
);
DROP FUNCTION IF EXISTS harvest.resume_workflows(
    text, text, text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[]
);
DROP FUNCTION IF EXISTS harvest.signal_workflows(
    text, jsonb, text, text, text[], timestamptz, timestamptz, text, text, integer, boolean, text, text, uuid[], text
);
