-- 0075: harvest._apply_decision returns one named composite (harvest.applied_decision, below)
-- where it had fifteen OUT parameters, and takes its caller's clock (p_now); a decision's
-- handed activities are rows (harvest.worker_activity_task, below) until the call's answer,
-- so harvest._hand_activities, _hand_activities_of_runs and _write_held return those; the trigger
-- executions_flow_release probes for a closed run's flow-control rows before it calls
-- harvest._flow_release (docs/performance.md, "SQL path, ninth cut"). The old signatures go
-- here; the new ones are installed with the functions, after the migrations (its callers are
-- all in functions/).
DROP FUNCTION IF EXISTS harvest._apply_decision(
    uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint, harvest.executions, text[],
    integer, text, boolean, boolean
);
DROP FUNCTION IF EXISTS harvest._hand_activities(harvest.executions, integer[], jsonb[], text, timestamptz);
DROP FUNCTION IF EXISTS harvest._hand_activities_of_runs(
    harvest.executions[], uuid[], integer[], integer[], jsonb[], text, timestamptz
);
DROP FUNCTION IF EXISTS harvest._write_held(
    harvest.held_run_row[], uuid[], bigint[], text[], jsonb[], harvest.executions[], uuid[], integer[], jsonb[],
    text, timestamptz
);
CREATE TYPE harvest.worker_activity_task AS (
    task_id bigint,
    kind text,
    execution_id uuid,
    workflow_name text,
    workflow_id text,
    queue text,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb,
    attempt integer,
    fencing_token bigint,
    heartbeat_details jsonb
);
CREATE TYPE harvest.applied_decision AS (
    last_event_id bigint,
    execution_status text,
    handed harvest.worker_activity_task ARRAY,
    deferred_types text ARRAY,
    deferred_datas jsonb ARRAY,
    deferred_last bigint,
    deferred_hand_seq integer,
    deferred_hand jsonb,
    deferred_bytes bigint,
    deferred_through bigint,
    deferred_hold boolean,
    caps_pending boolean,
    deferred_status text,
    deferred_output jsonb,
    deferred_failure jsonb,
    worker_queues text ARRAY
);
CREATE OR REPLACE FUNCTION harvest._executions_flow_release()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM harvest.workflow_slots AS s WHERE s.execution_id = NEW.id)
       OR EXISTS (SELECT 1 FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = NEW.id)
       OR EXISTS (SELECT 1 FROM harvest.mutex_waiters AS w WHERE w.execution_id = NEW.id) THEN
        PERFORM harvest._flow_release(NEW.id);
    END IF;
    RETURN NULL;
END;
$$;
