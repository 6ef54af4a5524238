-- Reading executions and ending them from outside.

CREATE OR REPLACE FUNCTION harvest.get_execution(p_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row harvest.executions;
BEGIN
    SELECT * INTO v_row FROM harvest.executions WHERE id = p_execution_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'execution % does not exist', p_execution_id USING ERRCODE = 'HR002';
    END IF;
    RETURN v_row;
END;
$$;

-- The history after a given event id (0 = from the start), in order.
CREATE OR REPLACE FUNCTION harvest.get_history(p_execution_id uuid, p_after_event_id bigint DEFAULT 0)
RETURNS TABLE (event_id bigint, event_type text, event_data jsonb, created_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT ev.event_id, ev.event_type, ev.event_data, ev.created_at
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_id > coalesce(p_after_event_id, 0)
    ORDER BY ev.event_id;
$$;

-- End a run at once: no cleanup code runs, open activities and timers are dropped.
CREATE OR REPLACE FUNCTION harvest.terminate_workflow(p_execution_id uuid, p_reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    v_execution := harvest._lock_running_execution(p_execution_id, 'terminate');
    PERFORM harvest._audit('workflow.terminate', p_execution_id::text, NULL, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name));
    PERFORM harvest._append_event(p_execution_id, 'WorkflowTerminated',
        jsonb_build_object('reason', p_reason));
    PERFORM harvest._close_execution(p_execution_id, 'TERMINATED', NULL,
        jsonb_build_object('error_type', 'Terminated', 'message', coalesce(p_reason, 'terminated'),
                           'non_retryable', true, 'details', NULL));
END;
$$;
