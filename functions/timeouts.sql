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
            v_heartbeat_timeout := (v_task.options ->> 'heartbeat_timeout')::double precision;
            v_error_type := CASE
                WHEN v_task.kind = 'workflow' THEN NULL
                WHEN v_heartbeat_timeout IS NOT NULL
                     AND coalesce(v_task.heartbeat_at, v_task.started_at)
                         + make_interval(secs => v_heartbeat_timeout) <= v_now
                     AND v_task.started_at + make_interval(secs =>
                         coalesce((v_task.options ->> 'start_to_close')::double precision, 300)) > v_now
                THEN 'HeartbeatTimeout' ELSE 'StartToCloseTimeout' END;
            RETURN QUERY SELECT * FROM harvest._expire_attempt(v_execution, v_task, v_error_type,
                'timed out (' || v_error_type || ')');
        END IF;
    END LOOP;
END;
$$;

-- Take back one running task whose holder is gone: a workflow task goes back to pending (a
-- crashed decider wrote nothing); an activity fails that attempt with p_error_type (p_what
-- ends its message) and retries per its policy. The row of expire_tasks' answer, for both
-- sweeps that expire leases (expire_tasks, expire_lost_workers).
CREATE OR REPLACE FUNCTION harvest._expire_attempt(
    p_execution harvest.executions, p_task harvest.tasks, p_error_type text, p_what text
)
RETURNS TABLE (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
)
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_task.kind = 'workflow' THEN
        UPDATE harvest.tasks AS t
        SET status = CASE WHEN p_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
            lease_owner = NULL, lease_expires_at = NULL, due_at = harvest.now()
        WHERE t.id = p_task.id;
        PERFORM harvest._notify_queue(p_task.queue);
        -- (error_type: why it came back, WorkerLost; NULL when its lease ran out)
        RETURN QUERY SELECT p_task.id, p_task.kind, 'released'::text, p_execution.workflow_name,
            NULL::text, p_error_type, p_task.execution_id, p_task.attempt;
    ELSE
        RETURN QUERY SELECT p_task.id, p_task.kind, harvest._fail_activity_attempt(p_execution, p_task,
            jsonb_build_object('error_type', p_error_type, 'non_retryable', false,
                'message', 'attempt ' || p_task.attempt || ' of ' || p_task.activity_name
                           || ' held by ' || coalesce(p_task.lease_owner, 'its task token (completed elsewhere)')
                           || ' ' || p_what,
                'details', NULL)),
            p_execution.workflow_name, p_task.activity_name, p_error_type, p_task.execution_id, p_task.attempt;
    END IF;
END;
$$;

-- A lost worker's tasks come back without waiting for their leases. A worker is lost when it
-- has not heartbeated for its lost_after_secs (registered by the worker, default 6 x its
-- heartbeat interval: workers.lost_at, moved by each heartbeat); a killed worker (SIGKILL, an OOM
-- kill, a pod killed after its grace) is lost that long after its last heartbeat, where its
-- activities' leases run to start_to_close (5 minutes by default). Each running activity it holds
-- fails that attempt with WorkerLost and retries per its policy; each workflow task goes back to
-- pending. A worker alive but cut off from the database cannot complete what it held: each
-- completion, failure or heartbeat of a claim is checked against the task's fencing token,
-- which the next claim replaces, so its late result is refused (HR004) and the run keeps the
-- new attempt's. Bounded by p_limit tasks; locked rows are skipped; a worker is marked done
-- (lost_at NULL) once nothing it held is left, so while every worker heartbeats a pass is
-- one probe of workers_lost. A worker that heartbeats again is watched again.
-- p_scanned_secs: how long the caller's scans have answered without a break (NULL: no bound).
-- A worker whose lost_after_secs is longer is left: its silence may be the outage the caller
-- has just come back from, and it heartbeats again within its interval (a third of its
-- lost_after at most) of the database's return; so a fleet of mixed heartbeat intervals
-- reconnecting after an outage loses none of its work (worker.py _scan).
CREATE OR REPLACE FUNCTION harvest.expire_lost_workers(
    p_limit integer DEFAULT 100, p_scanned_secs double precision DEFAULT NULL
)
RETURNS TABLE (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_left integer := p_limit;
    v_worker record;
    v_candidate record;
    v_execution harvest.executions;
    v_task harvest.tasks;
    v_done boolean;
BEGIN
    PERFORM harvest._check_limit('expire_lost_workers', p_limit, 10000);
    IF NOT coalesce(p_scanned_secs >= 0 AND p_scanned_secs < 'Infinity', true) THEN
        RAISE EXCEPTION 'scanned_secs % is out of range', harvest._num_text(p_scanned_secs) USING ERRCODE = 'HR001',
            HINT = 'pass how many seconds the scans have answered without a break (0 or more), or NULL for no bound';
    END IF;
    FOR v_worker IN
        SELECT w.id, w.last_heartbeat_at, w.lost_after_secs FROM harvest.workers AS w
        WHERE w.lost_at < v_now AND (p_scanned_secs IS NULL OR w.lost_after_secs <= p_scanned_secs)
        ORDER BY w.lost_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED  -- a heartbeat that came first moved lost_at: the row is not read
    LOOP
        EXIT WHEN v_left <= 0;
        v_done := true;
        FOR v_candidate IN
            SELECT t.id, t.execution_id FROM harvest.tasks AS t
            WHERE t.status = 'running' AND t.lease_owner = v_worker.id AND t.kind <> 'timer'
            ORDER BY t.id LIMIT v_left + 1
        LOOP
            IF v_left <= 0 THEN
                v_done := false;  -- more than this pass may take: the next pass goes on
                EXIT;
            END IF;
            SELECT * INTO v_execution FROM harvest.executions AS e
            WHERE e.id = v_candidate.execution_id FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                SELECT * INTO v_task FROM harvest.tasks AS t
                WHERE t.id = v_candidate.id AND t.status = 'running' AND t.lease_owner = v_worker.id
                FOR UPDATE SKIP LOCKED;
            END IF;
            IF NOT FOUND THEN
                -- locked elsewhere (a pass at it next time) or settled since the read
                v_done := v_done AND NOT EXISTS (
                    SELECT 1 FROM harvest.tasks AS t
                    WHERE t.id = v_candidate.id AND t.status = 'running' AND t.lease_owner = v_worker.id);
                CONTINUE;
            END IF;
            v_left := v_left - 1;
            RETURN QUERY SELECT * FROM harvest._expire_attempt(v_execution, v_task, 'WorkerLost',
                'was lost (WorkerLost: no worker heartbeat since '
                || harvest._iso_time(v_worker.last_heartbeat_at) || ', lost after '
                || harvest._num_text(v_worker.lost_after_secs) || ' s)');
        END LOOP;
        IF v_done THEN
            UPDATE harvest.workers AS w SET lost_at = NULL WHERE w.id = v_worker.id;
        END IF;
    END LOOP;
END;
$$;

-- Take back every task p_worker_id holds now, waiting for the locks (register_worker: the id
-- registered by a new process, whose predecessor's tasks must not wait for their leases). The
-- runs first, all of them in id order (the execution-then-task lock order), then their tasks,
-- re-read under the locks; a task claimed since under a run not locked here is left (only a
-- live process sharing the id claims one). Rows as expire_lost_workers'.
CREATE OR REPLACE FUNCTION harvest._take_back_worker_tasks(p_worker_id text, p_what text)
RETURNS TABLE (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_runs uuid[];
    v_task harvest.tasks;
    v_execution harvest.executions;
BEGIN
    WITH locked AS (
        SELECT e.id FROM harvest.executions AS e
        WHERE e.id IN (SELECT t.execution_id FROM harvest.tasks AS t
                       WHERE t.status = 'running' AND t.lease_owner = p_worker_id AND t.kind <> 'timer')
        ORDER BY e.id
        FOR UPDATE
    )
    SELECT array_agg(l.id) INTO v_runs FROM locked AS l;
    IF v_runs IS NULL THEN
        RETURN;
    END IF;
    FOR v_task IN
        SELECT * FROM harvest.tasks AS t
        WHERE t.execution_id = ANY(v_runs) AND t.status = 'running' AND t.lease_owner = p_worker_id
          AND t.kind <> 'timer'
        ORDER BY t.id
        FOR UPDATE
    LOOP
        SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = v_task.execution_id;
        RETURN QUERY SELECT * FROM harvest._expire_attempt(v_execution, v_task, 'WorkerLost', p_what);
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
COMMENT ON FUNCTION harvest.expire_lost_workers IS
'A lost worker''s tasks come back: a worker silent past its lost_after_secs has each running activity it holds '
'fail that attempt with WorkerLost (retried per its policy) and each workflow task go back to pending (its row''s '
'error_type WorkerLost too); its late '
'completions are refused by the fencing token. Bounded by p_limit tasks, skipping locked rows; one index probe '
'while every worker heartbeats. A worker whose lost_after_secs exceeds p_scanned_secs (how long the caller''s '
'scans have answered; NULL: no bound) is left. Called by the scanner, harvest.scan (role harvest_worker).';
COMMENT ON FUNCTION harvest.expire_workflows IS
'End runs past their run or execution timeout as TIMED_OUT; returns how many. Called by the scanner, harvest.scan'
' (role harvest_worker).';
COMMENT ON FUNCTION harvest.heartbeat_workflow_task IS
'Extend a running workflow task''s lease to now + p_lease_secs under its fencing token while its worker still '
'decides it (a local activity, a long replay); false when the task is no longer this claim''s or its lease ran '
'out. Called by workers (role harvest_worker).';
