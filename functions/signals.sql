-- Signals and cancellation: durable messages into a running workflow. A signal is
-- a SignalReceived event, so it is buffered in the history until the workflow
-- reads it and delivered in the order the database accepted it.

CREATE OR REPLACE FUNCTION harvest.signal_workflow(
    p_execution_id uuid, p_signal_name text, p_payload jsonb DEFAULT 'null'::jsonb,
    p_signal_id text DEFAULT NULL,
    -- The sender's span (W3C traceparent): the workflow task that reads the signal links to it.
    p_traceparent text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_event_id bigint;
BEGIN
    IF p_signal_name IS NULL OR btrim(p_signal_name) = '' THEN
        RAISE EXCEPTION 'signal name is empty' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload(format('the payload of signal %s', p_signal_name), p_payload,
                                   harvest._payload_limit());
    PERFORM harvest._check_traceparent(p_traceparent);
    v_execution := harvest._lock_running_execution(p_execution_id, 'signal');
    v_event_id := harvest._append_event(p_execution_id, 'SignalReceived', jsonb_build_object(
        'name', p_signal_name, 'payload', coalesce(p_payload, 'null'::jsonb),
        'signal_id', coalesce(p_signal_id, gen_random_uuid()::text))
        || CASE WHEN p_traceparent IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('traceparent', p_traceparent) END);
    PERFORM harvest._ensure_workflow_task(p_execution_id);
    -- Through the HTTP API or the dashboard: audited, without the payload (functions/audit.sql).
    PERFORM harvest._audit_asserted('workflow.signal', p_execution_id::text, jsonb_build_object(
        'signal_name', p_signal_name, 'event_id', v_event_id));
    RETURN v_event_id;
END;
$$;

-- Signal the running execution of (workflow_name, workflow_id), starting one
-- first when none is running, in one transaction.
CREATE OR REPLACE FUNCTION harvest.signal_with_start(
    p_workflow_name text,
    p_workflow_id text,
    p_signal_name text,
    p_signal_payload jsonb DEFAULT 'null'::jsonb,
    p_input jsonb DEFAULT '[]'::jsonb,
    p_queue text DEFAULT 'default',
    p_search_attributes jsonb DEFAULT '{}'::jsonb,
    -- The caller's span (W3C traceparent): a run started here continues its trace, and
    -- the signal links to it (signal_workflow).
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (execution_id uuid, workflow_id text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_started record;
BEGIN
    IF p_workflow_id IS NULL OR p_workflow_id = '' THEN
        RAISE EXCEPTION 'signal_with_start needs a workflow_id' USING ERRCODE = 'HR001';
    END IF;
    -- Attach to a running run; over a terminal one (or none), start fresh.
    SELECT * INTO v_started FROM harvest.start_workflow(
        p_workflow_name => p_workflow_name, p_input => p_input, p_workflow_id => p_workflow_id,
        p_queue => p_queue, p_reuse_policy => 'terminate_if_running',
        p_conflict_policy => 'use_existing', p_search_attributes => p_search_attributes,
        p_traceparent => p_traceparent);
    PERFORM harvest.signal_workflow(v_started.execution_id, p_signal_name, p_signal_payload,
                                    p_traceparent => p_traceparent);
    RETURN QUERY SELECT v_started.execution_id, v_started.workflow_id, v_started.started_fresh;
END;
$$;

-- Ask a run to cancel. The workflow sees it at its current await point and may
-- clean up; activities learn it on their next heartbeat. Returns false when a
-- cancel was already requested (asking twice changes nothing).
CREATE OR REPLACE FUNCTION harvest.cancel_workflow(p_execution_id uuid, p_reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    v_execution := harvest._lock_running_execution(p_execution_id, 'cancel');
    PERFORM harvest._audit('workflow.cancel', p_execution_id::text, NULL, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name,
        'already_requested', v_execution.cancel_requested));
    IF v_execution.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE harvest.executions SET cancel_requested = true WHERE id = p_execution_id;
    PERFORM harvest._append_event(p_execution_id, 'WorkflowCancelRequested',
        jsonb_build_object('reason', p_reason));
    PERFORM harvest._ensure_workflow_task(p_execution_id);
    RETURN true;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.signal_workflow IS
'Append a SignalReceived event to a RUNNING run and wake it; returns the event id. HR005 when the run has ended, '
'HR008 for a payload over payload_limit(); p_traceparent (the sender''s W3C span, HR001 when malformed) is kept on the '
'event for the reading task''s span link. Called by clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.signal_with_start IS
'Signal the running run of (workflow_name, workflow_id), starting one first when none runs, in one transaction; '
'p_traceparent is the caller''s span, for the run it starts and the signal. Called by clients (role '
'harvest_operator).';
COMMENT ON FUNCTION harvest.cancel_workflow IS
'Ask a RUNNING run to cancel (the workflow sees it at its await point, activities on their next heartbeat), '
'audited; returns false when already requested, HR005 when it has ended. Called by clients (role '
'harvest_operator).';
