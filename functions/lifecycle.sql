-- Lifecycle: pausing and resuming a run, and completing an activity elsewhere by
-- its task token (docs/lifecycle.md).
--
-- Pause. A PAUSED run is live (it keeps its business key, its workflow slot and
-- its mutexes; supersede and quotas count it) but none of its work starts: every
-- task of it that no worker holds waits in the task status 'paused', which no
-- claim and no timer sweep reads (tasks_claimable and tasks_timers_due cover
-- 'pending' only). Work already running finishes: an activity's result or failure
-- is recorded, a decision in flight is applied, and what they wake waits too
-- (_ensure_workflow_task creates a paused run's workflow task 'paused'; a retry or
-- a released lease goes back 'paused'). Signals and cancel requests are recorded
-- as usual and reach the workflow after the resume, in order. Resume turns the
-- paused tasks back to 'pending': a timer that fell due meanwhile fires at the next
-- claim, once (the timer row is deleted as it fires).
--
-- Deadlines keep running while a run is paused: an activity's schedule_to_close
-- still fails it (the failure is recorded and waits), and a run or execution
-- timeout that passes ends the run at the first scanner pass after its resume.

-- The status a task of p_execution_id takes when it goes back to the queue: 'paused'
-- while the run is PAUSED, else 'pending'. The caller holds the run's row lock (or a
-- share lock), so a pause cannot slip between this read and the task's update.
CREATE OR REPLACE FUNCTION harvest._queued_status(p_execution_id uuid)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN EXISTS (
        SELECT 1 FROM harvest.executions AS e
        WHERE e.id = p_execution_id AND (e.status = 'PAUSED') IS TRUE  -- (core.sql: IS TRUE)
    ) THEN 'paused' ELSE 'pending' END;
$$;

-- Pause a RUNNING run: returns true, or false when it was already paused (nothing
-- changes, but the call is audited). HR005 once the run has ended, HR013 for a run a
-- rebalance moved.
CREATE OR REPLACE FUNCTION harvest.pause_workflow(
    p_execution_id uuid, p_reason text DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    PERFORM harvest._check_reason('a pause', p_reason);
    v_execution := harvest._lock_running_execution(p_execution_id, 'pause');
    PERFORM harvest._audit('workflow.pause', p_execution_id::text, p_operator_id, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name,
        'already_paused', v_execution.status = 'PAUSED'));
    RETURN harvest._pause_execution(v_execution, p_reason, p_operator_id);
END;
$$;

-- The pause itself, of a live run p_execution (locked by the caller, _lock_running_execution):
-- false when it was paused already. pause_workflow's body, and pause_workflows' for each run
-- (executions.sql, _act_on_workflows), each writing its own audit row.
CREATE OR REPLACE FUNCTION harvest._pause_execution(
    p_execution harvest.executions, p_reason text, p_operator_id text
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_execution.status = 'PAUSED' THEN
        RETURN false;
    END IF;
    UPDATE harvest.executions AS e SET status = 'PAUSED' WHERE e.id = p_execution.id;
    UPDATE harvest.tasks AS t SET status = 'paused'
    WHERE t.execution_id = p_execution.id AND t.status = 'pending';
    PERFORM harvest._append_event(p_execution.id, 'WorkflowPaused', jsonb_build_object(
        'reason', p_reason, 'operator_id', p_operator_id));
    RETURN true;
END;
$$;

-- Resume a PAUSED run: returns true, or false when it was running already.
CREATE OR REPLACE FUNCTION harvest.resume_workflow(
    p_execution_id uuid, p_reason text DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    PERFORM harvest._check_reason('a resume', p_reason);
    v_execution := harvest._lock_running_execution(p_execution_id, 'resume');
    PERFORM harvest._audit('workflow.resume', p_execution_id::text, p_operator_id, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name,
        'was_paused', v_execution.status = 'PAUSED'));
    RETURN harvest._resume_execution(v_execution, p_reason, p_operator_id);
END;
$$;

-- The resume itself, of a live run p_execution (locked by the caller): false when it was not
-- paused. resume_workflow's body, and resume_workflows' for each run (_act_on_workflows).
CREATE OR REPLACE FUNCTION harvest._resume_execution(
    p_execution harvest.executions, p_reason text, p_operator_id text
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_queues text[];
    v_since timestamptz;
BEGIN
    IF p_execution.status <> 'PAUSED' THEN
        RETURN false;
    END IF;
    UPDATE harvest.executions AS e SET status = 'RUNNING' WHERE e.id = p_execution.id;
    WITH resumed AS (
        UPDATE harvest.tasks AS t SET status = 'pending'
        WHERE t.execution_id = p_execution.id AND t.status = 'paused'
        RETURNING t.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM resumed AS r;
    SELECT max(ev.created_at) INTO v_since FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution.id AND ev.event_type = 'WorkflowPaused';
    PERFORM harvest._append_event(p_execution.id, 'WorkflowResumed', jsonb_build_object(
        'reason', p_reason, 'operator_id', p_operator_id,
        'paused_secs', extract(epoch FROM harvest.now() - v_since)));
    PERFORM harvest._notify_queue(q.name) FROM unnest(v_queues) AS q (name);
    RETURN true;
END;
$$;

-- External completion. An activity that returns "completed elsewhere" keeps its
-- task row 'running' under its lease; the worker lets go of it (detach_activity),
-- and whoever holds the task token completes, fails or heartbeats it later. The
-- token is 'v1:<execution_id>:<task_id>:<seq>:<attempt>:<fencing_token>'
-- (harvest/core/task_token.py makes it): the fencing token fences it exactly as a
-- worker's claim is fenced, so once the lease ran out (start_to_close, or the
-- heartbeat timeout with no heartbeat) and the attempt was retried or failed, the
-- token is refused (HR004).

-- The parts of a task token; HR001 when it is not one.
CREATE OR REPLACE FUNCTION harvest._parse_task_token(
    p_task_token text,
    OUT execution_id uuid, OUT task_id bigint, OUT seq integer, OUT attempt integer, OUT fencing_token bigint
)
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_task_token IS NULL
       OR p_task_token !~ '^v1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9]{1,18}:[0-9]{1,9}:[0-9]{1,9}:[0-9]{1,18}$' THEN
        RAISE EXCEPTION 'task token "%" is not a Harvest task token', left(coalesce(p_task_token, ''), 120)
            USING ERRCODE = 'HR001',
            HINT = 'pass the token the activity read from ctx.task_token, unchanged';
    END IF;
    execution_id := split_part(p_task_token, ':', 2)::uuid;
    task_id := split_part(p_task_token, ':', 3)::bigint;
    seq := split_part(p_task_token, ':', 4)::integer;
    attempt := split_part(p_task_token, ':', 5)::integer;
    fencing_token := split_part(p_task_token, ':', 6)::bigint;
END;
$$;

-- Lock the running activity task a token names, or raise HR004 saying what became of
-- its attempt (completed, failed, retried, lease expired) for p_action (complete, fail,
-- heartbeat). p_result, when given, makes a repeat of the completion that was recorded
-- an answer instead of an error: already_completed is then returned (and task is NULL).
CREATE OR REPLACE FUNCTION harvest._lock_token_task(
    p_task_token text, p_result jsonb, p_action text,
    OUT task harvest.tasks, OUT already_completed boolean
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_token record := harvest._parse_task_token(p_task_token);
    v_try record;
    v_event record;
BEGIN
    already_completed := false;
    v_try := harvest._try_lock_claimed_task(v_token.task_id, v_token.fencing_token, 'activity');
    IF v_try.problem IS NULL AND ((v_try.task).execution_id <> v_token.execution_id
                                  OR (v_try.task).seq <> v_token.seq) THEN
        RAISE EXCEPTION 'task token names execution % activity %, but task % belongs to execution % activity %',
            v_token.execution_id, v_token.seq, v_token.task_id, (v_try.task).execution_id, (v_try.task).seq
            USING ERRCODE = 'HR001', HINT = 'pass the token the activity read from ctx.task_token, unchanged';
    END IF;
    IF v_try.problem IS NULL THEN
        task := v_try.task;
        RETURN;
    END IF;
    -- What the history says about this attempt of this activity.
    SELECT ev.event_type, ev.event_data INTO v_event FROM harvest.events AS ev
    WHERE ev.execution_id = v_token.execution_id AND ev.event_type IN ('ActivityCompleted', 'ActivityFailed')
      AND (ev.event_data ->> 'seq')::integer = v_token.seq
    ORDER BY ev.event_id DESC LIMIT 1;
    IF v_event.event_type = 'ActivityCompleted' AND (v_event.event_data ->> 'attempt')::integer = v_token.attempt
       AND p_result IS NOT NULL AND v_event.event_data -> 'result' = p_result THEN
        already_completed := true;
        RETURN;
    END IF;
    RAISE EXCEPTION 'cannot % activity % of execution % (attempt %) by this token: %',
        p_action, v_token.seq, v_token.execution_id, v_token.attempt,
        CASE
            WHEN v_event.event_type = 'ActivityCompleted'
                THEN format('it was already completed (attempt %s)%s', v_event.event_data ->> 'attempt',
                            CASE WHEN p_result IS NOT NULL THEN ' with another result' ELSE '' END)
            WHEN v_event.event_type = 'ActivityFailed'
                THEN format('it already failed for good (%s: %s)', v_event.event_data #>> '{failure,error_type}',
                            v_event.event_data #>> '{failure,message}')
            -- A retried attempt failed first: by its token, or the scanner's timeout. The task
            -- row keeps the last failure; naming it says which (not always a lease that ran out).
            WHEN v_try.problem = 'stale'
                THEN coalesce((SELECT format('the attempt failed (%s: %s) and was retried',
                                             coalesce(t.last_failure ->> 'error_type', 'Error'),
                                             t.last_failure ->> 'message')
                               FROM harvest.tasks AS t
                               WHERE t.id = v_token.task_id AND t.last_failure IS NOT NULL),
                              'the attempt was retried')
            WHEN v_try.problem = 'expired'
                THEN format('its lease expired at %s', (SELECT harvest._iso_time(t.lease_expires_at)
                                                        FROM harvest.tasks AS t WHERE t.id = v_token.task_id))
            ELSE 'the activity is no longer waiting (it timed out and failed, or the run ended)'
        END
        USING ERRCODE = 'HR004',
        HINT = 'a late completion is refused; the activity''s retry (if any) has its own token';
END;
$$;

-- A worker lets go of an activity its handler left to be completed elsewhere
-- (ctx.complete_async()): the task stays running under its lease, held by no worker,
-- so a worker's drain or stop does not hand it out again. Returns false when the
-- task is no longer this claim's (completed already by its token, or its lease lost).
CREATE OR REPLACE FUNCTION harvest.detach_activity(p_task_id bigint, p_fencing_token bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_try record := harvest._try_lock_claimed_task(p_task_id, p_fencing_token, 'activity');
BEGIN
    IF v_try.problem IS NOT NULL THEN
        RETURN false;
    END IF;
    UPDATE harvest.tasks AS t SET lease_owner = NULL WHERE t.id = p_task_id;
    RETURN true;
END;
$$;

-- Complete an activity by its task token, from any process; returns 'completed', or
-- 'already_completed' for a repeat of the recorded completion (same attempt, same
-- result). HR004 when the attempt timed out, was retried or failed (see above).
CREATE OR REPLACE FUNCTION harvest.complete_activity_by_token(p_task_token text, p_result jsonb DEFAULT 'null'::jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_locked record;
BEGIN
    PERFORM harvest._check_sent('the result of the activity of task token ' || left(p_task_token, 120),
                                   p_result, harvest._payload_limit());
    v_locked := harvest._lock_token_task(p_task_token, coalesce(p_result, 'null'::jsonb), 'complete');
    IF v_locked.already_completed THEN
        RETURN 'already_completed';
    END IF;
    PERFORM harvest._record_activity_result(v_locked.task, p_result, NULL, NULL, NULL);
    RETURN 'completed';
END;
$$;

-- Fail one attempt of an activity by its task token; returns what fail_activity returns
-- (retry_scheduled, dead_lettered or failed).
CREATE OR REPLACE FUNCTION harvest.fail_activity_by_token(p_task_token text, p_failure jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_locked record;
    v_execution harvest.executions;
BEGIN
    IF p_failure IS NULL OR jsonb_typeof(p_failure) <> 'object' THEN
        RAISE EXCEPTION 'failure must be a JSON object {error_type, message, non_retryable, details}'
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_sent('the failure of the activity of task token ' || left(p_task_token, 120),
                                   p_failure, harvest._payload_limit());
    v_locked := harvest._lock_token_task(p_task_token, NULL, 'fail');
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = (v_locked.task).execution_id;
    RETURN harvest._fail_activity_attempt(v_execution, v_locked.task, p_failure);
END;
$$;

-- Heartbeat an activity by its task token: extends its lease (never past
-- start_to_close) and answers whether its run was asked to cancel.
CREATE OR REPLACE FUNCTION harvest.heartbeat_activity_by_token(p_task_token text, p_details jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_locked record;
BEGIN
    PERFORM harvest._check_depth('the heartbeat details of the activity of task token ' || left(p_task_token, 120),
                                 p_details);
    v_locked := harvest._lock_token_task(p_task_token, NULL, 'heartbeat');
    RETURN harvest.heartbeat_activity((v_locked.task).id, (v_locked.task).fencing_token, p_details);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.pause_workflow IS
'Pause a RUNNING run: none of its tasks is claimed and no timer of it fires until resume_workflow; running work '
'finishes and is recorded, signals are buffered. Audited; false when already paused, HR005 once ended. For '
'operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.resume_workflow IS
'Resume a PAUSED run: its waiting tasks are queued again, overdue timers fire at the next claim (once), buffered '
'signals are delivered in order. Audited; false when it was running, HR005 once ended. For operators (role '
'harvest_operator).';
COMMENT ON FUNCTION harvest.detach_activity IS
'A worker lets go of an activity its handler left to be completed by task token (ctx.complete_async()); the '
'lease and its timeouts stay. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.complete_activity_by_token IS
'Complete an activity by its task token from any process; already_completed for a repeat of the recorded '
'completion, HR004 once its attempt timed out, was retried or failed. Roles harvest_operator, harvest_worker.';
COMMENT ON FUNCTION harvest.fail_activity_by_token IS
'Fail one attempt of an activity by its task token (retried, dead-lettered or failed per its policy); HR004 once '
'the attempt timed out, was retried or failed. Roles harvest_operator, harvest_worker.';
COMMENT ON FUNCTION harvest.heartbeat_activity_by_token IS
'Heartbeat an activity by its task token (extends the lease within start_to_close; returns whether the run was '
'asked to cancel); HR004 once the attempt is no longer current. Roles harvest_operator, harvest_worker.';
