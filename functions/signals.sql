-- Signals and cancellation: durable messages into a running workflow. A signal is
-- a SignalReceived event, so it is buffered in the history until the workflow
-- reads it and delivered in the order the database accepted it.

-- The one body of signal_workflow and signal_workflow_eager: the checks, the
-- SignalReceived event and the wake-up of the run's workflow task, handed to
-- p_worker_id (p_worker_queues: its queues, from _hand_off_queues; NULL: none is
-- handed) under complete_activities' rules (activities.sql, _wake_after_results:
-- its cached run decided last, the run is RUNNING, the hand-off rules of claim.sql
-- allow it), else queued. Returns the event id and the handed task (as a claim
-- would return it) or NULL.
CREATE OR REPLACE FUNCTION harvest._signal_workflow(
    p_execution_id uuid, p_signal_name text, p_payload jsonb, p_signal_id text, p_traceparent text,
    p_worker_id text, p_worker_queues text[], p_workflow_lease_secs double precision,
    OUT event_id bigint, OUT handed jsonb
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_task_id bigint;
    -- (the check of many signals in one transaction, below)
    v_xmin xid;
    v_one_statement boolean;
    v_own boolean;
    v_top bigint;
    v_after bigint;
BEGIN
    IF p_signal_name IS NULL OR btrim(p_signal_name) = '' THEN
        RAISE EXCEPTION 'signal name is empty' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_sent(format('the payload of signal %s', p_signal_name), p_payload,
                                   harvest._payload_limit());
    PERFORM harvest._check_traceparent(p_traceparent);
    v_execution := harvest._lock_running_execution(p_execution_id, 'signal');
    -- Signals to one run in one transaction: each moves the run's row, whose versions Postgres
    -- keeps until the transaction ends, and every later lookup of the row reads past them all,
    -- so n signals cost n squared (100,000 in one statement: ten minutes holding the run's
    -- lock). Refused once this transaction has added 10,000 events to the run: looked at on
    -- every 1,000th event only (two key lookups of events), whether the event 10,000 back is
    -- this transaction's own and was not written by the statement that wrote the next one
    -- (cmin, the command of the transaction that inserted it): a reset's fork gets its
    -- source's history in one INSERT, which moved the fork's row once, not once an event, and
    -- a signal after the reset in its transaction is not refused for the copy.
    -- This transaction's own: its id, or one of its subtransactions' (a savepoint's, an
    -- EXCEPTION block's; such a loop costs the most: 11,000 signals, six and a half minutes),
    -- which pg_xact_status says is in progress (a row this statement sees whose inserter is in
    -- progress is this transaction's). A subtransaction's id comes after the transaction's, so
    -- the event's 32-bit xmin is widened to the xid8 pg_xact_status takes as the one within
    -- 2^31 after the transaction's id; one that is not yet given out (an old frozen row's
    -- xmin) is refused by pg_xact_status (22023), not an id of this transaction.
    -- docs/messages.md, "How many signals a run takes".
    -- (Nested IFs: the first is a simple expression, which PL/pgSQL evaluates without the
    -- executor; one that held the query would start the executor on every signal.)
    IF (v_execution.last_event_id + 1) % 1000 = 0 THEN
        SELECT ev.xmin, nx.cmin = ev.cmin INTO v_xmin, v_one_statement  -- (cid has = only)
        FROM harvest.events AS ev
        JOIN harvest.events AS nx ON nx.execution_id = ev.execution_id AND nx.event_id = ev.event_id + 1
        WHERE ev.execution_id = p_execution_id AND ev.event_id = v_execution.last_event_id + 1 - 10000;
        IF v_xmin IS NOT NULL AND NOT v_one_statement THEN
            v_own := v_xmin = pg_current_xact_id()::xid;
            v_top := pg_current_xact_id()::text::bigint;
            v_after := (v_xmin::text::bigint - v_top % 4294967296 + 4294967296) % 4294967296;
            IF NOT v_own AND v_after > 0 AND v_after < 2147483648 THEN
                BEGIN
                    v_own := pg_xact_status((v_top + v_after)::text::xid8) = 'in progress';
                EXCEPTION WHEN invalid_parameter_value THEN
                    v_own := false;  -- an id not given out yet: not this transaction's
                END;
            END IF;
            IF v_own THEN
                RAISE EXCEPTION 'too many signals to execution % in one transaction: it has added 10,000 events to '
                                'the run''s history, and each further signal would cost more than the last',
                                p_execution_id
                    USING ERRCODE = 'HR001',
                          HINT = 'send one signal whose payload is the list, or commit every 1,000 signals or so';
            END IF;
        END IF;
    END IF;
    event_id := harvest._append_event(p_execution_id, 'SignalReceived', jsonb_build_object(
        'name', p_signal_name, 'payload', coalesce(p_payload, 'null'::jsonb),
        'signal_id', coalesce(p_signal_id, gen_random_uuid()::text))
        || CASE WHEN p_traceparent IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('traceparent', p_traceparent) END);
    IF p_worker_queues IS NULL THEN
        PERFORM harvest._ensure_workflow_task(p_execution_id);
    ELSE
        -- v_execution is the row as locked: the append changed neither its status nor decided_by.
        v_task_id := harvest._wake_after_results(v_execution, p_worker_id, p_worker_queues, p_workflow_lease_secs);
    END IF;
    -- Through the HTTP API or the dashboard: audited, without the payload (functions/audit.sql).
    PERFORM harvest._audit_asserted('workflow.signal', p_execution_id::text, jsonb_build_object(
        'signal_name', p_signal_name, 'event_id', event_id));
    IF v_task_id IS NOT NULL THEN
        handed := harvest._handed_task(v_task_id, p_worker_id, harvest._owner_mode_on());
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.signal_workflow(
    p_execution_id uuid, p_signal_name text, p_payload jsonb DEFAULT 'null'::jsonb,
    p_signal_id text DEFAULT NULL,
    -- The sender's span (W3C traceparent): the workflow task that reads the signal links to it.
    p_traceparent text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN (harvest._signal_workflow(p_execution_id, p_signal_name, p_payload, p_signal_id, p_traceparent,
                                     NULL, NULL, NULL)).event_id;
END;
$$;

-- Eager signal (docs/messages.md, "Eager signals"): signal_workflow from a process that
-- also hosts a worker, p_worker_id. The woken workflow task is leased to that worker in
-- the signal's own transaction (a p_workflow_lease_secs lease, a fresh fencing token), as
-- complete_activities hands one to the worker whose cached run decided last, so the
-- worker decides without a NOTIFY and a claim. Only when the session holds
-- harvest_worker as well (else it is signal_workflow, the task queued), the worker is
-- active and polls the run's queue, its cached run decided last, the run is RUNNING,
-- the claim would have been free to pick the task next (claim.sql, _may_hand_off), and,
-- in owner mode, the worker owns the run's partition. Returns {"event_id", "handed":
-- the task as the worker receives it (claim.sql _worker_task), or null, "awaited_signals":
-- the names the run's pending waits ask for, as the signal found them (list_awaited_signals)}.
CREATE OR REPLACE FUNCTION harvest.signal_workflow_eager(
    p_execution_id uuid, p_signal_name text, p_payload jsonb, p_signal_id text, p_traceparent text,
    p_worker_id text, p_workflow_lease_secs double precision
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_queues text[];
    v_signal record;
BEGIN
    PERFORM harvest._check_lease('workflow task lease', p_workflow_lease_secs);
    IF harvest._session_has_role('harvest_worker') THEN
        v_queues := harvest._hand_off_queues(p_worker_id);
        IF v_queues IS NOT NULL AND harvest._owner_mode_on() AND harvest._owner_epoch(
               (SELECT e.workflow_id FROM harvest.executions AS e WHERE e.id = p_execution_id), p_worker_id) IS NULL THEN
            v_queues := NULL;  -- another worker owns the run's partition (owners.sql)
        END IF;
    END IF;
    v_signal := harvest._signal_workflow(p_execution_id, p_signal_name, p_payload, p_signal_id, p_traceparent,
                                         p_worker_id, v_queues, p_workflow_lease_secs);
    RETURN jsonb_build_object('event_id', v_signal.event_id, 'handed', v_signal.handed,
        'awaited_signals', to_jsonb(ARRAY(SELECT DISTINCT a.name FROM harvest.list_awaited_signals(p_execution_id, v_signal.event_id) AS a
                                          ORDER BY 1)));
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
    p_queue text DEFAULT NULL,  -- NULL: the workflow's registered queue (start.sql, _start_queue)
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
    PERFORM harvest._check_reason('a cancel', p_reason);
    v_execution := harvest._lock_running_execution(p_execution_id, 'cancel');
    PERFORM harvest._audit('workflow.cancel', p_execution_id::text, NULL, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name,
        'already_requested', v_execution.cancel_requested));
    RETURN harvest._request_cancel(v_execution, p_reason);
END;
$$;

-- The one body of a cancel request, for cancel_workflow and the batch by filter
-- (executions.sql, _act_on_workflows): on a run its caller locked and found live, mark
-- the request, record it and wake the run; false when one was already requested.
CREATE OR REPLACE FUNCTION harvest._request_cancel(p_execution harvest.executions, p_reason text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_execution.cancel_requested THEN
        RETURN false;
    END IF;
    UPDATE harvest.executions SET cancel_requested = true WHERE id = p_execution.id;
    PERFORM harvest._append_event(p_execution.id, 'WorkflowCancelRequested',
        jsonb_build_object('reason', p_reason));
    PERFORM harvest._ensure_workflow_task(p_execution.id);
    RETURN true;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.signal_workflow IS
'Append a SignalReceived event to a RUNNING run and wake it; returns the event id. HR005 when the run has ended, '
'HR008 for a payload over payload_limit(), HR001 once the caller''s transaction has added 10,000 events to the run '
'(docs/messages.md); p_traceparent (the sender''s W3C span, HR001 when malformed) is kept on the '
'event for the reading task''s span link. Called by clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.signal_workflow_eager IS
'signal_workflow from a process that also hosts worker p_worker_id: the woken workflow task is leased to that worker '
'in the signal''s transaction (p_workflow_lease_secs) when the session also holds harvest_worker and the hand-off rules '
'allow it (its cached run decided last, it is active and polls the queue, claim.sql''s _may_hand_off, owner mode''s '
'partition), else queued as signal_workflow queues it; returns {"event_id", "handed": the task as the worker '
'receives it (claim_tasks'' columns it reads), or null}. Called by clients that host a worker (role harvest_operator).';
COMMENT ON FUNCTION harvest.signal_with_start IS
'Signal the running run of (workflow_name, workflow_id), starting one first when none runs, in one transaction; '
'p_traceparent is the caller''s span, for the run it starts and the signal. Called by clients (role '
'harvest_operator).';
COMMENT ON FUNCTION harvest.cancel_workflow IS
'Ask a RUNNING run to cancel (the workflow sees it at its await point, activities on their next heartbeat), '
'audited; returns false when already requested, HR005 when it has ended. Called by clients (role '
'harvest_operator).';
