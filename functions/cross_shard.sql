-- Cross-shard children: a child placed on another shard than its parent's
-- (ChildPlacement, docs/workflows.md; docs/sharding.md "Cross-shard children and
-- relays").
--
-- The parent's decision stays on the parent's shard: _start_child (decide.sql)
-- mints the child's execution id for the target shard, appends ChildWorkflowStarted
-- with it and writes a harvest.cross_shard_children row in the same transaction.
-- The cross-shard pump then drives the row, calling functions on two databases
-- and never holding a connection on one while it calls the other:
--
--   on the parent's shard               on the child's shard
--   claim_cross_shard_children      ->  start_cross_shard_child (status starting)
--                                       get_cross_shard_child  (status running)
--                                       cancel_cross_shard_child (the parent ended)
--   set_cross_shard_child_running       <-  started
--   complete_cross_shard_child        <-  the child's end (a pull), or a failed start
--                                       clear_owed_child_end (status delivered)
--   complete_cross_shard_child(NULL)  <-  acknowledged: the row goes
--   release_cross_shard_child       <-  the target could not be reached
--
-- Every step is idempotent: the child's id is the key of its start, reading is
-- free, a settle of a row already delivered or gone changes nothing.
--
-- The child's end is owed to its parent until the parent's history has it: the
-- child's run carries end_owed_to_shard (the parent's shard) from its start, and
-- retention keeps it while it is set (_retention_keeps), however short the child
-- shard's window and however long the parent's shard is away. The pump clears it
-- (clear_owed_child_end) only after the parent's shard committed the end (the
-- row is then delivered until it is cleared), or when the parent's close policy
-- reaches the child (the parent ended first: its end is owed to nobody). An
-- operator releases the ends owed to a shard that is gone for good
-- (release_owed_child_ends, retention.sql).

-- On the parent's shard: up to p_limit rows due now, each leased for p_lease_secs (a pump
-- that dies loses nothing: the lease runs out). In due order (no next_attempt_at: due at once,
-- oldest first), read down cross_shard_children_due: a claim reads the rows it takes, and a
-- running child, leased for the pump's poll, goes behind every row due before its lease ends
-- (oldest first alone, the oldest p_limit running children were due again at every tick and
-- the newer ones never read: migration 0118).
CREATE OR REPLACE FUNCTION harvest.claim_cross_shard_children(
    p_limit integer DEFAULT 100, p_lease_secs double precision DEFAULT 30
)
RETURNS TABLE (
    child_execution_id uuid, parent_execution_id uuid, parent_seq integer, target_shard integer,
    workflow_name text, workflow_id text, queue text, input jsonb, parent_close_policy text,
    status text, cancel_requested boolean, attempts integer, traceparent text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_lease('lease', p_lease_secs);
    -- (The rows taken are updated by their primary key, an array of ids: joined to the claim's
    -- rows, a generic plan made while the table was small read every row to update a few.)
    RETURN QUERY
    UPDATE harvest.cross_shard_children AS c
    SET next_attempt_at = v_now + make_interval(secs => p_lease_secs)
    WHERE c.child_execution_id = ANY(ARRAY(
        SELECT d.child_execution_id FROM harvest.cross_shard_children AS d
        WHERE coalesce(d.next_attempt_at, '-infinity'::timestamptz) <= v_now
        ORDER BY coalesce(d.next_attempt_at, '-infinity'::timestamptz), d.created_at, d.child_execution_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING c.child_execution_id, c.parent_execution_id, c.parent_seq, c.target_shard, c.workflow_name,
              c.workflow_id, c.queue, c.input, c.parent_close_policy, c.status, c.cancel_requested, c.attempts,
              c.traceparent;
END;
$$;

-- On the parent's shard: the child was started on its shard (status running); the
-- row is due again at once, for the pull of its end. An abandoned child whose parent
-- ended meanwhile is let go instead (cancel_requested: the pump's visit with the
-- abandon policy tells the child's shard that its end is owed to nobody, then the
-- row goes).
CREATE OR REPLACE FUNCTION harvest.set_cross_shard_child_running(p_child_execution_id uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE harvest.cross_shard_children AS c
    SET status = 'running', attempts = 0, last_error = NULL, next_attempt_at = NULL,
        cancel_requested = c.cancel_requested OR (c.parent_close_policy = 'abandon' AND NOT EXISTS (
            SELECT 1 FROM harvest.executions AS e
            WHERE e.id = c.parent_execution_id AND e.status IN ('RUNNING', 'PAUSED')))
    WHERE c.child_execution_id = p_child_execution_id AND c.status = 'starting';
    RETURN FOUND OR EXISTS (SELECT 1 FROM harvest.cross_shard_children AS c
                            WHERE c.child_execution_id = p_child_execution_id);
END;
$$;

-- On the parent's shard: the child ended with p_status (COMPLETED, FAILED,
-- CANCELLED, TERMINATED, TIMED_OUT, or START_FAILED when its start was refused):
-- the parent, if it still runs, receives ChildWorkflowCompleted or
-- ChildWorkflowFailed as a same-shard child's end would reach it. A refused start
-- (no child there) drops the row; an end makes it delivered, kept until the child's
-- shard is told (clear_owed_child_end) that its end is no longer owed. p_status
-- NULL only drops the row (acknowledged, or the parent ended first and its policy
-- was applied). false when the end was delivered before (or the row is gone).
CREATE OR REPLACE FUNCTION harvest.complete_cross_shard_child(
    p_child_execution_id uuid, p_status text, p_output jsonb DEFAULT NULL, p_failure jsonb DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_parent uuid;
    v_row harvest.cross_shard_children;
BEGIN
    IF p_status IS NOT NULL AND p_status NOT IN (
        'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT', 'START_FAILED'
    ) THEN
        RAISE EXCEPTION 'child status "%" is not an end', p_status USING ERRCODE = 'HR001',
            HINT = 'use COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT or START_FAILED';
    END IF;
    -- Lock order: the parent execution, then the row (as the decision took them).
    SELECT c.parent_execution_id INTO v_parent FROM harvest.cross_shard_children AS c
    WHERE c.child_execution_id = p_child_execution_id;
    PERFORM 1 FROM harvest.executions AS e WHERE e.id = v_parent FOR UPDATE;
    IF p_status IS NULL OR p_status = 'START_FAILED' THEN
        DELETE FROM harvest.cross_shard_children AS c WHERE c.child_execution_id = p_child_execution_id
        RETURNING * INTO v_row;
    ELSE
        UPDATE harvest.cross_shard_children AS c
        SET status = 'delivered', attempts = 0, last_error = NULL, next_attempt_at = NULL
        WHERE c.child_execution_id = p_child_execution_id AND c.status <> 'delivered'
        RETURNING * INTO v_row;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_status IS NULL OR NOT EXISTS (
        SELECT 1 FROM harvest.executions AS e
        WHERE e.id = v_row.parent_execution_id AND e.status IN ('RUNNING', 'PAUSED')
    ) THEN
        RETURN true;
    END IF;
    IF p_status = 'COMPLETED' THEN
        PERFORM harvest._append_event(v_row.parent_execution_id, 'ChildWorkflowCompleted', jsonb_build_object(
            'seq', v_row.parent_seq, 'child_execution_id', p_child_execution_id, 'result', p_output));
    ELSE
        PERFORM harvest._append_event(v_row.parent_execution_id, 'ChildWorkflowFailed', jsonb_build_object(
            'seq', v_row.parent_seq, 'child_execution_id', p_child_execution_id, 'status', p_status,
            'failure', p_failure));
    END IF;
    PERFORM harvest._ensure_workflow_task(v_row.parent_execution_id);
    RETURN true;
END;
$$;

-- On the parent's shard: a step that made no progress (the target shard could not
-- be reached): the row stays with p_error and is due again after min(attempts, 6) x 5 s.
CREATE OR REPLACE FUNCTION harvest.release_cross_shard_child(p_child_execution_id uuid, p_error text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
BEGIN
    UPDATE harvest.cross_shard_children AS c
    SET attempts = c.attempts + 1, last_attempt_at = v_now, last_error = left(p_error, 2000),
        next_attempt_at = v_now + make_interval(secs => least(c.attempts + 1, 6) * 5)
    WHERE c.child_execution_id = p_child_execution_id;
    RETURN FOUND;
END;
$$;

-- On the child's shard: start the child under the id its parent's decision minted
-- for this shard, once. outcome: started, exists (a run with that id is here: a
-- retried start; status tells its state) or failed (refused, as a same-shard
-- child's start is: WorkflowAlreadyExists, QuotaExceeded, PayloadTooLarge,
-- UnknownWorkflow; failure says why, for the parent's ChildWorkflowFailed).
CREATE OR REPLACE FUNCTION harvest.start_cross_shard_child(
    p_child_execution_id uuid, p_parent_execution_id uuid, p_parent_seq integer, p_workflow_name text,
    p_workflow_id text, p_queue text, p_input jsonb, p_parent_close_policy text,
    -- The parent's child.start span (claim_cross_shard_children's traceparent), or NULL.
    p_traceparent text DEFAULT NULL,
    -- The shard the parent lives on (the pump's source), which its end is owed to: a parent a
    -- rebalance moved keeps an id of the shard it was born on (NULL: that one, an older pump's).
    p_parent_shard integer DEFAULT NULL
)
RETURNS TABLE (outcome text, status text, failure jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
    v_prior harvest.executions;
    v_policy jsonb;
    v_keys record;
    v_quota_key text;
    v_concurrency_key text;
    v_error_message text;
    v_error_detail text;
BEGIN
    IF p_child_execution_id IS NULL OR p_parent_execution_id IS NULL OR p_parent_seq IS NULL THEN
        RAISE EXCEPTION 'a cross-shard child needs its execution id, its parent and the parent''s seq'
            USING ERRCODE = 'HR001';
    END IF;
    IF harvest.shard_of(p_child_execution_id) <> harvest.get_shard_id() THEN
        RAISE EXCEPTION 'execution % belongs to shard %, not to this database (shard %)', p_child_execution_id,
            harvest.shard_of(p_child_execution_id), harvest.get_shard_id() USING ERRCODE = 'HR011',
            DETAIL = jsonb_build_object('requested_shard_id', harvest.shard_of(p_child_execution_id),
                                        'shard_id', harvest.get_shard_id())::text;
    END IF;
    IF p_parent_close_policy IS NULL OR p_parent_close_policy NOT IN ('terminate', 'request_cancel', 'abandon') THEN
        RAISE EXCEPTION 'unknown parent_close_policy "%"', p_parent_close_policy USING ERRCODE = 'HR001',
            HINT = 'use terminate, request_cancel or abandon';
    END IF;
    -- Two pumps starting the same child wait here for each other.
    PERFORM pg_advisory_xact_lock(hashtextextended('harvest.cross_shard_child:' || p_child_execution_id, 0));
    SELECT e.status INTO v_status FROM harvest.executions AS e WHERE e.id = p_child_execution_id;
    IF FOUND THEN
        RETURN QUERY SELECT 'exists'::text, v_status, NULL::jsonb;
        RETURN;
    END IF;
    BEGIN
        PERFORM harvest._start_check_arguments(p_workflow_name, p_input, p_workflow_id, p_queue, '{}'::jsonb,
                                               'terminate_if_running', 'fail');
        PERFORM harvest._start_check_registered(p_workflow_name, p_queue, true);
        v_prior := harvest._start_resolve_prior(p_workflow_name, p_workflow_id, 'terminate_if_running', 'fail');
        IF v_prior.id IS NOT NULL THEN
            RAISE EXCEPTION 'a run of % with workflow_id % is already running', p_workflow_name, p_workflow_id
                USING ERRCODE = 'HR003';
        END IF;
        SELECT p.policy INTO v_policy FROM harvest.flow_policies AS p
        WHERE p.kind = 'workflow' AND p.name = p_workflow_name;
        IF v_policy ?| ARRAY['quota', 'concurrency'] THEN
            v_keys := harvest._start_flow_keys(p_workflow_name, p_input, v_policy);
            v_quota_key := v_keys.quota_key;
            v_concurrency_key := v_keys.concurrency_key;
        END IF;
        PERFORM harvest._start_insert(p_workflow_name, p_input, p_workflow_id, p_queue, '{}'::jsonb, 0,
            p_parent_execution_id, harvest.get_shard_id(), NULL, NULL, v_policy, v_quota_key, v_concurrency_key,
            p_child_execution_id, harvest._check_traceparent(p_traceparent));
        -- Its end is owed to the parent's shard until the pump says the parent has it.
        UPDATE harvest.executions AS e SET parent_seq = p_parent_seq, parent_close_policy = p_parent_close_policy,
            end_owed_to_shard = coalesce(p_parent_shard, harvest.shard_of(p_parent_execution_id))
        WHERE e.id = p_child_execution_id;
    EXCEPTION
        WHEN SQLSTATE 'HR003' THEN
            RETURN QUERY SELECT 'failed'::text, 'START_FAILED'::text, jsonb_build_object(
                'error_type', 'WorkflowAlreadyExists', 'non_retryable', true,
                'message', 'a run of ' || p_workflow_name || ' with workflow_id ' || p_workflow_id
                           || ' is already running', 'details', NULL);
            RETURN;
        WHEN SQLSTATE 'HR001' OR SQLSTATE 'HR006' OR SQLSTATE 'HR008' OR SQLSTATE 'HR010' THEN
            -- (HR001: its arguments refused, a key over 1,000 bytes say: the same on every try, so
            -- a failed start its parent's code may catch, as _start_child makes it on one shard.)
            GET STACKED DIAGNOSTICS v_error_message = MESSAGE_TEXT, v_error_detail = PG_EXCEPTION_DETAIL;
            RETURN QUERY SELECT 'failed'::text, 'START_FAILED'::text, jsonb_build_object(
                'error_type', CASE SQLSTATE WHEN 'HR006' THEN 'QuotaExceeded' WHEN 'HR008' THEN 'PayloadTooLarge'
                                            WHEN 'HR001' THEN 'InvalidArgument' ELSE 'UnknownWorkflow' END,
                'non_retryable', true, 'message', v_error_message, 'details', nullif(v_error_detail, '')::jsonb);
            RETURN;
    END;
    RETURN QUERY SELECT 'started'::text, 'RUNNING'::text, NULL::jsonb;
END;
$$;

-- On the child's shard: the cross-shard child's current run, following its continue-as-new
-- successors (unlocked; id NULL when no run with that id is here). Every run of the chain
-- carries the child's parent and the parent's seq (_continue_as_new), so the current one is read
-- by that link in one step, however long the chain (an entity child may rotate for ever). A run
-- answered CONTINUED_AS_NEW has no later run here: a continue-as-new commits its successor
-- with its close, so in one snapshot a rotated run always has one, unless it was erased by
-- hand or purged. The chain is then broken for good: no read will find a successor later, and
-- the run answered is the chain's last (the one whose successor is gone).
CREATE OR REPLACE FUNCTION harvest._current_cross_shard_run(p_child_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_run harvest.executions;
    v_current harvest.executions;
BEGIN
    SELECT * INTO v_run FROM harvest.executions AS e WHERE e.id = p_child_execution_id;
    IF FOUND AND v_run.status = 'CONTINUED_AS_NEW' AND v_run.parent_id IS NOT NULL THEN
        -- The chain's one run that did not continue, newest first on executions_workflow_id_runs
        -- (the chain shares its workflow name and id): its first row, not every child of the
        -- parent (a fan-out's thousands) nor every run of the chain.
        SELECT * INTO v_current FROM harvest.executions AS e
        WHERE e.workflow_name = v_run.workflow_name AND e.workflow_id = v_run.workflow_id
          AND e.parent_id = v_run.parent_id AND e.parent_seq IS NOT DISTINCT FROM v_run.parent_seq
          AND e.status <> 'CONTINUED_AS_NEW'
        ORDER BY e.created_at DESC
        LIMIT 1;
        -- (Not coalesce(v_current, v_run): a record of NULLs is not NULL, so a chain with no
        -- later run read as a run with no id and no status, which the pump took for running.)
        IF FOUND THEN
            RETURN v_current;
        END IF;
        -- A broken chain: its last run, the one whose successor (its output names it) is gone,
        -- not the child's first run when it rotated more than once. Read down the same index,
        -- newest first: the first such run is the newest (runs created in one instant, as under
        -- a test clock, are told apart by the link, not by their order).
        SELECT * INTO v_current FROM harvest.executions AS e
        WHERE e.workflow_name = v_run.workflow_name AND e.workflow_id = v_run.workflow_id
          AND e.parent_id = v_run.parent_id AND e.parent_seq IS NOT DISTINCT FROM v_run.parent_seq
          AND NOT EXISTS (SELECT 1 FROM harvest.executions AS n
                          WHERE n.id = (e.output ->> 'continued_as_new')::uuid)
        ORDER BY e.created_at DESC
        LIMIT 1;
        IF FOUND THEN
            RETURN v_current;
        END IF;
    END IF;
    RETURN v_run;
END;
$$;

-- On the child's shard: where the child is now: its current run's status and, once it ended,
-- its output or failure (_current_cross_shard_run). HR002 when no run with that id is here (a
-- shard restored to an earlier instant), or when its chain has no current run (its last run
-- continued as new and the successor was erased or purged): no end will ever come, and the
-- pump keeps the parent's row with this error, retried with its backoff, until the parent
-- ends (its close policy then finds nothing to do, and the row goes).
CREATE OR REPLACE FUNCTION harvest.get_cross_shard_child(p_child_execution_id uuid)
RETURNS TABLE (execution_id uuid, status text, output jsonb, failure jsonb)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_run harvest.executions := harvest._current_cross_shard_run(p_child_execution_id);
BEGIN
    IF v_run.id IS NULL THEN
        RAISE EXCEPTION 'execution % does not exist on this shard (%)', p_child_execution_id,
            harvest.get_shard_id() USING ERRCODE = 'HR002';
    END IF;
    IF v_run.status = 'CONTINUED_AS_NEW' THEN
        RAISE EXCEPTION 'cross-shard child % has no current run on this shard (%): its chain ends at run %, '
            'which continued as new, and no later run is here (erased or purged)', p_child_execution_id,
            harvest.get_shard_id(), v_run.id USING ERRCODE = 'HR002',
            HINT = 'no end will come for it: end its parent (cancel or terminate) to let the parent''s row go';
    END IF;
    RETURN QUERY SELECT v_run.id, v_run.status, v_run.output, v_run.failure;
END;
$$;

-- On the child's shard: the cross-shard child's current run, locked (NULL: no such child
-- here). The run read as current may be continuing as new right now, its decision holding its
-- row: the lock waits for that decision, and a run it then finds CONTINUED_AS_NEW is read
-- again, so the caller acts on the successor (which inherited the parent link and the owed
-- end), never on the closed predecessor. A chain's runs are locked oldest first, which is id
-- order (a successor's id is minted later; docs/internals.md, "Lock order"). A run already
-- CONTINUED_AS_NEW when read, before the lock, is a broken chain (_current_cross_shard_run):
-- no read again will find a successor, so it is answered at once, the chain's last run,
-- ended (the clear finds nothing owed on it, the policy nothing running), and the server log
-- names it; 40001, which the pump retries, is only for a chain that kept rotating under it.
CREATE OR REPLACE FUNCTION harvest._lock_current_cross_shard_child(p_child_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_read harvest.executions;
    v_run harvest.executions;
BEGIN
    FOR i IN 1..10 LOOP
        -- (A statement of its own: it reads what committed while the lock below waited.)
        v_read := harvest._current_cross_shard_run(p_child_execution_id);
        IF v_read.id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT * INTO v_run FROM harvest.executions AS e WHERE e.id = v_read.id FOR UPDATE;
        IF v_run.status IS DISTINCT FROM 'CONTINUED_AS_NEW' THEN
            RETURN v_run;
        END IF;
        IF v_read.status = 'CONTINUED_AS_NEW' THEN
            RAISE LOG 'cross-shard child %: its chain ends at run %, which continued as new, and no later run '
                'is here (erased or purged); acting on that run', p_child_execution_id, v_run.id;
            RETURN v_run;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'child % kept continuing as new while its current run was locked', p_child_execution_id
        USING ERRCODE = '40001', HINT = 'the pump retries on its next sweep';
END;
$$;

-- On the child's shard: the child's end is no longer owed to its parent's shard (the
-- parent's history has it, or the parent ended first): its current run's
-- end_owed_to_shard is cleared, and retention treats it as any run. The current run
-- is locked before it is cleared (_lock_current_cross_shard_child), so an owed end a
-- concurrent continue-as-new handed to the successor is not missed.
-- false when nothing was owed (acknowledged before, or no such child here).
CREATE OR REPLACE FUNCTION harvest.clear_owed_child_end(p_child_execution_id uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_current harvest.executions;
BEGIN
    v_current := harvest._lock_current_cross_shard_child(p_child_execution_id);
    IF v_current.id IS NULL THEN
        RETURN false;
    END IF;
    UPDATE harvest.executions AS e SET end_owed_to_shard = NULL
    WHERE e.id = v_current.id AND e.end_owed_to_shard IS NOT NULL;
    RETURN FOUND;
END;
$$;

-- On the child's shard: the parent ended first; apply its close policy to the
-- child's current run as a same-shard parent's close would (terminate, or request
-- cancel once). outcome: terminated, cancel_requested, not_running (the child had
-- ended, or never started here), abandoned (policy abandon: nothing to do).
CREATE OR REPLACE FUNCTION harvest.cancel_cross_shard_child(
    p_child_execution_id uuid, p_policy text, p_parent_execution_id uuid
)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_target harvest.executions;
BEGIN
    IF p_policy IS NULL OR p_policy NOT IN ('terminate', 'request_cancel', 'abandon') THEN
        RAISE EXCEPTION 'unknown parent_close_policy "%"', p_policy USING ERRCODE = 'HR001',
            HINT = 'use terminate, request_cancel or abandon';
    END IF;
    -- The parent ended: whatever its policy, nobody will take the child's end.
    PERFORM harvest.clear_owed_child_end(p_child_execution_id);
    IF p_policy = 'abandon' THEN
        RETURN 'abandoned';
    END IF;
    -- The policy is the current run's, locked: a run read as current and locked only after its
    -- continue-as-new committed is CONTINUED_AS_NEW, and the successor, which inherited the
    -- parent link, would run on uncancelled. (Not left to the clear above having locked it.)
    v_target := harvest._lock_current_cross_shard_child(p_child_execution_id);
    IF v_target.id IS NULL OR v_target.status NOT IN ('RUNNING', 'PAUSED') THEN
        RETURN 'not_running';
    END IF;
    IF p_policy = 'terminate' THEN
        PERFORM harvest._append_event(v_target.id, 'WorkflowTerminated',
            jsonb_build_object('reason', 'parent ' || p_parent_execution_id || ' closed'));
        PERFORM harvest._close_execution(v_target.id, 'TERMINATED', NULL, jsonb_build_object(
            'error_type', 'Terminated', 'message', 'the parent workflow closed', 'non_retryable', true,
            'details', NULL));
        RETURN 'terminated';
    END IF;
    IF NOT v_target.cancel_requested THEN
        UPDATE harvest.executions AS e SET cancel_requested = true WHERE e.id = v_target.id;
        PERFORM harvest._append_event(v_target.id, 'WorkflowCancelRequested',
            jsonb_build_object('reason', 'the parent workflow closed'));
        PERFORM harvest._ensure_workflow_task(v_target.id);
    END IF;
    RETURN 'cancel_requested';
END;
$$;

-- The parent's side of its close (core.sql, _close_execution): its remote children
-- get its close policy (cancel_requested: the pump applies it on their shard, which
-- also tells that shard their ends are owed to nobody), abandoned ones included once
-- started (the pump's visit only lets their ends go); an abandoned child not started
-- yet is still started (set_cross_shard_child_running then lets it go the same way).
CREATE OR REPLACE FUNCTION harvest._close_cross_shard_children(p_parent_execution_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE harvest.cross_shard_children AS c SET cancel_requested = true, next_attempt_at = NULL
    WHERE c.parent_execution_id = p_parent_execution_id AND NOT c.cancel_requested
      AND (c.parent_close_policy <> 'abandon' OR c.status <> 'starting');
END;
$$;

COMMENT ON FUNCTION harvest.claim_cross_shard_children IS
'On a parent''s shard: up to p_limit cross-shard children due now, leased for p_lease_secs. Called by the '
'worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.set_cross_shard_child_running IS
'On a parent''s shard: a cross-shard child was started on its shard (status running). Called by the worker''s '
'cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.complete_cross_shard_child IS
'On a parent''s shard: a cross-shard child''s end reaches its running parent as ChildWorkflowCompleted or '
'ChildWorkflowFailed, and its row goes; false when settled before. Called by the worker''s cross-shard pump '
'(role harvest_worker).';
COMMENT ON FUNCTION harvest.release_cross_shard_child IS
'On a parent''s shard: a step that made no progress keeps the row with its error, due again after '
'min(attempts, 6) x 5 s. Called by the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.start_cross_shard_child IS
'On a child''s shard: start a cross-shard child under the id its parent minted, once (started, exists or '
'failed with the failure). Called by the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.get_cross_shard_child IS
'On a child''s shard: the current run of a cross-shard child (following continue-as-new) with its status and, '
'once ended, its output or failure. Called by the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.clear_owed_child_end IS
'On a child''s shard: the cross-shard child''s end is no longer owed to its parent (delivered, or the parent '
'ended first), so retention may take it. Called by the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.cancel_cross_shard_child IS
'On a child''s shard: apply the ended parent''s close policy (terminate, request_cancel, abandon) to a '
'cross-shard child, whose end is then owed to nobody. Called by the worker''s cross-shard pump (role harvest_worker).';
