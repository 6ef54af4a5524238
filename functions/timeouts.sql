-- Timeouts: crash recovery and the activity and workflow timeouts, swept by the
-- scanner (harvest.scan in scanner.sql) that every worker runs on a timer.
-- Bounded per call; rows locked elsewhere are skipped and picked up by the next
-- pass.
--
--   * a workflow task whose lease expired goes back to pending (a crashed
--     decider's work is simply redone; it wrote nothing);
--   * an activity whose lease expired failed that attempt with
--     StartToCloseTimeout or HeartbeatTimeout, then retries per its policy; the
--     attempt was counted once, when it was claimed;
--   * an activity past its schedule_to_close deadline fails for good with
--     ScheduleToCloseTimeout, whether pending or running;
--   * a run past its run or execution timeout ends TIMED_OUT (expire_workflows).

-- Each row names what it expired (workflow_type, and for an activity its name and the
-- error_type it failed with; the run's execution_id and the attempt) from the rows it already
-- holds, so the scanner counts the failed attempts no handler reported
-- (harvest_activity_failed_total) and logs each with its run, without another read.
CREATE OR REPLACE FUNCTION harvest.expire_tasks(p_limit integer DEFAULT 100)
RETURNS TABLE (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_candidate record;
    v_execution harvest.executions;
    v_task harvest.tasks;
    v_heartbeat_timeout double precision;
    v_error_type text;
BEGIN
    PERFORM harvest._check_limit('expire_tasks', p_limit, 10000);
    FOR v_candidate IN
        SELECT c.id, c.execution_id FROM (
            (SELECT t.id, t.execution_id FROM harvest.tasks AS t
             WHERE t.status = 'running' AND t.lease_expires_at < v_now
             ORDER BY t.lease_expires_at LIMIT p_limit)
            UNION
            (SELECT t.id, t.execution_id FROM harvest.tasks AS t
             WHERE t.deadline_at < v_now
             ORDER BY t.deadline_at LIMIT p_limit)
        ) AS c
        ORDER BY c.id
        LIMIT p_limit
    LOOP
        SELECT * INTO v_execution FROM harvest.executions AS e
        WHERE e.id = v_candidate.execution_id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        SELECT * INTO v_task FROM harvest.tasks AS t WHERE t.id = v_candidate.id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;

        IF v_task.kind = 'activity' AND v_task.deadline_at < v_now THEN
            v_error_type := 'ScheduleToCloseTimeout';
            RETURN QUERY SELECT v_task.id, v_task.kind, harvest._fail_activity_attempt(v_execution, v_task,
                jsonb_build_object('error_type', v_error_type, 'non_retryable', true,
                    'message', 'activity ' || v_task.activity_name || ' did not finish within its '
                               || 'schedule_to_close of ' || (v_task.options ->> 'schedule_to_close') || 's',
                    'details', NULL), false),
                v_execution.workflow_name, v_task.activity_name, v_error_type, v_task.execution_id, v_task.attempt;
        ELSIF v_task.status = 'running' AND v_task.lease_expires_at < v_now THEN
            IF v_task.kind = 'workflow' THEN
                UPDATE harvest.tasks
                SET status = CASE WHEN v_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
                    lease_owner = NULL, lease_expires_at = NULL, due_at = v_now
                WHERE id = v_task.id;
                PERFORM harvest._notify_queue(v_task.queue);
                RETURN QUERY SELECT v_task.id, v_task.kind, 'released'::text, v_execution.workflow_name,
                    NULL::text, NULL::text, v_task.execution_id, v_task.attempt;
            ELSE
                v_heartbeat_timeout := (v_task.options ->> 'heartbeat_timeout')::double precision;
                v_error_type := CASE
                    WHEN v_heartbeat_timeout IS NOT NULL
                         AND coalesce(v_task.heartbeat_at, v_task.started_at)
                             + make_interval(secs => v_heartbeat_timeout) <= v_now
                         AND v_task.started_at + make_interval(secs =>
                             coalesce((v_task.options ->> 'start_to_close')::double precision, 300)) > v_now
                    THEN 'HeartbeatTimeout' ELSE 'StartToCloseTimeout' END;
                RETURN QUERY SELECT v_task.id, v_task.kind, harvest._fail_activity_attempt(v_execution, v_task,
                    jsonb_build_object('error_type', v_error_type, 'non_retryable', false,
                        'message', 'attempt ' || v_task.attempt || ' of ' || v_task.activity_name
                                   || ' held by ' || coalesce(v_task.lease_owner, 'its task token (completed elsewhere)')
                                   || ' timed out (' || v_error_type || ')',
                        'details', NULL)),
                    v_execution.workflow_name, v_task.activity_name, v_error_type, v_task.execution_id,
                    v_task.attempt;
            END IF;
        END IF;
    END LOOP;
END;
$$;

-- End runs whose run timeout or execution timeout has passed, as TIMED_OUT.
CREATE OR REPLACE FUNCTION harvest.expire_workflows(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_id uuid;
    v_timed_out integer := 0;
    v_which text;
BEGIN
    PERFORM harvest._check_limit('expire_workflows', p_limit, 10000);
    FOR v_id IN
        SELECT e.id FROM harvest.executions AS e
        WHERE e.status = 'RUNNING' AND e.timeout_at < v_now
        ORDER BY e.timeout_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        SELECT CASE WHEN e.execution_timeout_at <= e.timeout_at THEN 'execution' ELSE 'run' END
        INTO v_which FROM harvest.executions AS e WHERE e.id = v_id;
        PERFORM harvest._append_event(v_id, 'WorkflowTimedOut', jsonb_build_object('timeout', v_which));
        PERFORM harvest._close_execution(v_id, 'TIMED_OUT', NULL, jsonb_build_object(
            'error_type', 'WorkflowTimedOut', 'message', 'the workflow ' || v_which || ' timeout passed',
            'non_retryable', true, 'details', NULL));
        v_timed_out := v_timed_out + 1;
    END LOOP;
    RETURN v_timed_out;
END;
$$;

-- A workflow task that runs long (a local activity, a long replay) keeps its lease: the
-- worker deciding it extends the lease while it works, under the claim's fencing token, so
-- expire_tasks does not hand the task to another worker that would run it again. A lease
-- that already ran out is not revived: the scanner may have released the task.
CREATE OR REPLACE FUNCTION harvest.heartbeat_workflow_task(
    p_task_id bigint, p_fencing_token bigint, p_lease_secs double precision
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_lease('workflow task lease', p_lease_secs);
    UPDATE harvest.tasks AS t
    SET lease_expires_at = harvest.now() + make_interval(secs => p_lease_secs)
    WHERE t.id = p_task_id AND t.kind = 'workflow' AND t.status = 'running'
      AND t.fencing_token = p_fencing_token AND t.lease_expires_at >= harvest.now();
    RETURN FOUND;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.expire_tasks IS
'Crash recovery and activity timeouts: expired workflow-task leases go back to pending, expired activity leases '
'fail that attempt, activities past schedule_to_close fail for good; bounded by p_limit, skipping locked rows. '
'Each row names the run''s workflow_type and execution_id, the attempt and, for an activity, its name and error_type '
'(the scanner counts and logs them). '
'Called by the scanner, harvest.scan (role harvest_worker).';
COMMENT ON FUNCTION harvest.expire_workflows IS
'End runs past their run or execution timeout as TIMED_OUT; returns how many. Called by the scanner, harvest.scan'
' (role harvest_worker).';
COMMENT ON FUNCTION harvest.heartbeat_workflow_task IS
'Extend a running workflow task''s lease to now + p_lease_secs under its fencing token while its worker still '
'decides it (a local activity, a long replay); false when the task is no longer this claim''s or its lease ran '
'out. Called by workers (role harvest_worker).';
