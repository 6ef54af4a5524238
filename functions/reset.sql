-- Reset: recover a running top-level workflow stuck on history its current code
-- can no longer replay. The source run ends TERMINATED; a fork on the same shard
-- carries the history through a completed boundary, gets a WorkflowResetFork
-- marker, and is queued to run under the current code. The offloaded payloads it
-- carries are its own copies (the source's erasure or retention leaves them).
--
-- A boundary is valid when nothing issued at or before it is still unresolved
-- there (activities, timers, children, updates, external signals and cancels),
-- the run holds or awaits no durable mutex there (the fork could not take the key
-- over safely: its history would hold it while the source's close hands it on),
-- and it does not cut a workflow
-- task's command group in half. Terminal runs (a FAILED one too: the spec's "Terminal
-- workflows ... are rejected"; an activity's failure is recovered by its dead letter, before
-- the run fails), child runs and continue-as-new successors are refused. dry_run reports the
-- plan and writes nothing. reset_workflows resets the running runs a filter selects, each to a
-- point named for them all (_reset_point).
--
-- Per-key workflow concurrency ("defer") counts the fork like the run it
-- replaces: an admitted source's workflow slot moves to the fork, and a source
-- still waiting for its slot leaves the fork's first workflow task gated as its own.

-- p_data with each offload reference named in p_renamed ({old id: new id}) pointing at the
-- new id. jsonb prints every key as "key": value whatever the session's settings, and a
-- quote inside a string is printed escaped, so the text below matches the reference's key and
-- value and nothing inside a string.
CREATE OR REPLACE FUNCTION harvest._renamed_refs(p_data jsonb, p_renamed jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_text text;
    v_old text;
BEGIN
    IF p_data IS NULL OR p_renamed IS NULL OR p_renamed = '{}'::jsonb THEN
        RETURN p_data;
    END IF;
    v_text := p_data::text;
    IF strpos(v_text, '"_harvest_ref": "') = 0 THEN
        RETURN p_data;
    END IF;
    -- The references in this value only (a run's history may hold thousands).
    FOR v_old IN SELECT DISTINCT r::text FROM harvest._payload_refs(p_data) AS r LOOP
        IF p_renamed ? v_old THEN
            v_text := replace(v_text, '"_harvest_ref": "' || v_old || '"',
                              '"_harvest_ref": "' || (p_renamed ->> v_old) || '"');
        END IF;
    END LOOP;
    RETURN v_text::jsonb;
END;
$$;

-- Problems that make p_execution a run no reset can take, whatever the point: a run
-- not RUNNING (HR005 in reset_workflow), a child, a continue-as-new successor.
CREATE OR REPLACE FUNCTION harvest._reset_run_problems(p_execution harvest.executions)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_problems text[] := ARRAY[]::text[];
BEGIN
    IF p_execution.status <> 'RUNNING' THEN
        v_problems := v_problems || ('the run is ' || p_execution.status || '; only running runs can be reset');
    END IF;
    IF p_execution.parent_id IS NOT NULL THEN
        v_problems := v_problems || ('the run is a child of ' || p_execution.parent_id
                                     || '; reset its top-level parent instead');
    END IF;
    IF p_execution.continued_from IS NOT NULL THEN
        v_problems := v_problems || ('the run continued from ' || p_execution.continued_from
                                     || '; continue-as-new histories cannot be reset');
    END IF;
    RETURN v_problems;
END;
$$;

-- Problems that make p_to_event an invalid reset point, as readable lines: the run's own
-- (_reset_run_problems) and the boundary's (_reset_boundary_problems).
CREATE OR REPLACE FUNCTION harvest._reset_problems(p_execution harvest.executions, p_to_event bigint)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN harvest._reset_run_problems(p_execution) || harvest._reset_boundary_problems(p_execution, p_to_event);
END;
$$;

-- Problems that make p_to_event an invalid boundary of p_execution's history: outside it,
-- inside a workflow task's command group, a command issued and unresolved by it, a mutex held.
CREATE OR REPLACE FUNCTION harvest._reset_boundary_problems(p_execution harvest.executions, p_to_event bigint)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_problems text[] := ARRAY[]::text[];
    v_next_type text;
    v_open record;
BEGIN
    IF p_to_event IS NULL OR p_to_event < 1 OR p_to_event > p_execution.last_event_id THEN
        RETURN v_problems || ('event ' || coalesce(p_to_event::text, 'NULL') || ' is outside the history (1..'
                              || p_execution.last_event_id || ')');
    END IF;
    SELECT ev.event_type INTO v_next_type FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution.id AND ev.event_id = p_to_event + 1;
    IF v_next_type IN ('ActivityScheduled', 'TimerStarted', 'MarkerRecorded', 'TimerCancelled',
                       'ChildWorkflowStarted', 'UpdateCompleted', 'ExternalSignalRequested',
                       'ExternalCancelRequested') THEN
        v_problems := v_problems || ('event ' || p_to_event || ' is inside a workflow task''s commands ('
                                     || v_next_type || ' follows); pick the last event of that group');
    END IF;
    -- Every command issued at or before the boundary must be resolved by it.
    FOR v_open IN
        SELECT c.event_id, c.event_type, (c.event_data ->> 'seq')::integer AS seq
        FROM harvest.events AS c
        WHERE c.execution_id = p_execution.id AND c.event_id <= p_to_event
          AND c.event_type IN ('ActivityScheduled', 'TimerStarted', 'ChildWorkflowStarted',
                               'ExternalSignalRequested', 'ExternalCancelRequested')
          AND NOT EXISTS (
              SELECT 1 FROM harvest.events AS r
              WHERE r.execution_id = p_execution.id AND r.event_id <= p_to_event
                AND r.event_type = ANY(CASE c.event_type
                    WHEN 'ActivityScheduled' THEN ARRAY['ActivityCompleted', 'ActivityFailed']
                    WHEN 'TimerStarted' THEN ARRAY['TimerFired']
                    WHEN 'ExternalSignalRequested' THEN ARRAY['ExternalSignalDelivered', 'ExternalSignalFailed']
                    WHEN 'ExternalCancelRequested' THEN ARRAY['ExternalCancelDelivered', 'ExternalCancelFailed']
                    ELSE ARRAY['ChildWorkflowCompleted', 'ChildWorkflowFailed'] END)
                AND (r.event_data ->> 'seq')::integer = (c.event_data ->> 'seq')::integer)
          AND NOT (c.event_type = 'TimerStarted' AND EXISTS (
              SELECT 1 FROM harvest.events AS x
              WHERE x.execution_id = p_execution.id AND x.event_id <= p_to_event
                AND x.event_type = 'TimerCancelled'
                AND (x.event_data ->> 'timer_seq')::integer = (c.event_data ->> 'seq')::integer))
        ORDER BY c.event_id
    LOOP
        v_problems := v_problems || (v_open.event_type || ' (seq ' || v_open.seq || ', event ' || v_open.event_id
                                     || ') is unresolved at event ' || p_to_event);
    END LOOP;
    FOR v_open IN
        SELECT a.event_id, a.event_data ->> 'update_id' AS update_id
        FROM harvest.events AS a
        WHERE a.execution_id = p_execution.id AND a.event_id <= p_to_event AND a.event_type = 'UpdateAccepted'
          AND NOT EXISTS (
              SELECT 1 FROM harvest.events AS d
              WHERE d.execution_id = p_execution.id AND d.event_id <= p_to_event
                AND d.event_type = 'UpdateCompleted'
                AND d.event_data ->> 'update_id' = a.event_data ->> 'update_id')
    LOOP
        v_problems := v_problems || ('update ' || v_open.update_id || ' (event ' || v_open.event_id
                                     || ') is unresolved at event ' || p_to_event);
    END LOOP;
    -- A mutex acquired (or asked for) and not released by the boundary.
    FOR v_open IN
        SELECT a.event_id, a.event_data #>> '{value,key}' AS key
        FROM harvest.events AS a
        WHERE a.execution_id = p_execution.id AND a.event_id <= p_to_event
          AND a.event_type = 'MarkerRecorded' AND a.event_data ->> 'kind' = 'mutex_acquire'
          AND NOT EXISTS (
              SELECT 1 FROM harvest.events AS r
              WHERE r.execution_id = p_execution.id AND r.event_id > a.event_id AND r.event_id <= p_to_event
                AND r.event_type = 'MarkerRecorded' AND r.event_data ->> 'kind' = 'mutex_release'
                AND r.event_data #>> '{value,key}' = a.event_data #>> '{value,key}')
        ORDER BY a.event_id
    LOOP
        v_problems := v_problems || ('mutex ' || quote_literal(v_open.key) || ' (asked for at event '
                                     || v_open.event_id || ') is held or awaited at event ' || p_to_event
                                     || '; a fork cannot take a mutex over: reset to before event '
                                     || v_open.event_id || ' or to after the block released it');
    END LOOP;
    RETURN v_problems;
END;
$$;

-- The reset point p_to names in p_execution's history, one name for many runs (the batch reset,
-- reset_workflows): 'before_time', the last valid boundary whose events were all written before
-- p_before (a bad deploy's time: the fork keeps what the good code wrote and replays none of what
-- the bad code did, which the fixed code may not replay); 'first_workflow_task', the first valid
-- boundary, so the fork does everything again. NULL when no event is a valid boundary (of the
-- 1000 candidates nearest the point looked at). (No point "before the first failed workflow
-- task": a run the bad code only made raise recovers by itself once the fix is deployed, and one
-- it made write history fails after the events the bad code wrote, so that point keeps them.)
CREATE OR REPLACE FUNCTION harvest._reset_point(p_execution harvest.executions, p_to text, p_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_first boolean := p_to = 'first_workflow_task';  -- (the first boundary up, else the last down)
    v_until bigint := p_execution.last_event_id;
    v_event bigint;
BEGIN
    IF NOT v_first THEN  -- (events are appended in event_id order: the first at or after p_before ends it)
        SELECT coalesce(min(ev.event_id) - 1, v_until) INTO v_until FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution.id AND ev.created_at >= p_before;
    END IF;
    FOR v_event IN
        SELECT ev.event_id FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution.id AND ev.event_id <= v_until
        ORDER BY CASE WHEN v_first THEN ev.event_id ELSE -ev.event_id END LIMIT 1000
    LOOP
        IF cardinality(harvest._reset_boundary_problems(p_execution, v_event)) = 0 THEN
            RETURN v_event;
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;

-- What a reset batch does with one run (reset_workflows' step and its dry run's points, one rule
-- for both): p_outcome 'reset' to p_point, or it is left: 'own_batch' (a fork p_batch_id made:
-- not reset again), 'fork_boundary' (a reset's fork whose point is the very boundary it was
-- forked at: the same command run again without its batch id would throw away what the fork did
-- since; an earlier time, a later deploy's time or first_workflow_task past it still resets it),
-- 'no_point' (no valid boundary), 'no_time' (before_time without a time: a dry run's only).
-- p_why says it in words (NULL for 'reset').
CREATE OR REPLACE FUNCTION harvest._reset_plan(
    p_execution harvest.executions, p_to text, p_before timestamptz, p_batch_id text,
    OUT p_point bigint, OUT p_outcome text, OUT p_why text
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_fork_at bigint;
BEGIN
    IF p_to = 'before_time' AND p_before IS NULL THEN
        p_outcome := 'no_time';
        p_why := 'no time given: before_time needs the bad deploy''s time';
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM harvest.events AS ev
               WHERE ev.execution_id = p_execution.id AND ev.event_type = 'WorkflowResetFork'
                 AND ev.event_data ->> 'batch_id' = p_batch_id) THEN
        p_outcome := 'own_batch';
        p_why := 'a fork this batch made: not reset again';
        RETURN;
    END IF;
    p_point := harvest._reset_point(p_execution, p_to, p_before);
    IF p_point IS NULL THEN
        p_outcome := 'no_point';
        p_why := 'no valid reset point ' || p_to || CASE WHEN p_to = 'before_time'
            THEN ' before ' || harvest._iso_time(p_before) || ' (none written before that time, or none '
                 'among the 1000 events nearest it)' ELSE '' END;
        RETURN;
    END IF;
    SELECT (ev.event_data ->> 'to_event')::bigint INTO v_fork_at FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution.id AND ev.event_type = 'WorkflowResetFork'
    ORDER BY ev.event_id DESC LIMIT 1;
    IF p_point = v_fork_at THEN
        p_outcome := 'fork_boundary';
        p_why := 'its own fork boundary: left as it is (forks_kept)';
        RETURN;
    END IF;
    p_outcome := 'reset';
END;
$$;

-- A reset batch's dry run, run by run (reset_workflows' points, in p_execution_ids' order): the
-- point the step would reset each to (event_id, and at: that event's time), or why none (why,
-- event_id NULL), or why a run with a point would be left (_reset_plan). As many runs as the
-- step's limit, each looked at as the step would: a dry run costs a step's reads.
CREATE OR REPLACE FUNCTION harvest._reset_points(
    p_execution_ids uuid[], p_to text, p_before timestamptz, p_batch_id text
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_out jsonb := '[]'::jsonb;
    v_execution harvest.executions;
    v_plan record;
BEGIN
    FOR v_execution IN
        SELECT e.* FROM unnest(p_execution_ids) WITH ORDINALITY AS u (id, n)
        JOIN harvest.executions AS e ON e.id = u.id ORDER BY u.n
    LOOP
        v_plan := harvest._reset_plan(v_execution, p_to, p_before, p_batch_id);
        v_out := v_out || jsonb_build_object(
            'execution_id', v_execution.id, 'event_id', v_plan.p_point,
            'at', (SELECT ev.created_at FROM harvest.events AS ev
                   WHERE ev.execution_id = v_execution.id AND ev.event_id = v_plan.p_point),
            'why', v_plan.p_why);
    END LOOP;
    RETURN v_out;
END;
$$;

-- HR001 unless p_signal_reapply is a reset's: drop or buffer (reset_workflow, reset_workflows).
CREATE OR REPLACE FUNCTION harvest._check_signal_reapply(p_signal_reapply text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_signal_reapply IS NULL OR p_signal_reapply NOT IN ('drop', 'buffer') THEN
        RAISE EXCEPTION 'unknown signal_reapply "%"', p_signal_reapply USING ERRCODE = 'HR001',
            HINT = 'use drop or buffer';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.reset_workflow(
    p_execution_id uuid,
    p_to_event bigint,
    p_reason text,
    p_operator_id text DEFAULT NULL,
    p_signal_reapply text DEFAULT 'drop',
    p_dry_run boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._reset_execution(p_execution_id, p_to_event, p_reason, p_operator_id, p_signal_reapply,
                                    p_dry_run, NULL);
END;
$$;

-- reset_workflow's body, and each run's of a batch reset (p_batch_id: the batch, written into the
-- fork's WorkflowResetFork and the run's workflow.reset audit row).
CREATE OR REPLACE FUNCTION harvest._reset_execution(
    p_execution_id uuid, p_to_event bigint, p_reason text, p_operator_id text, p_signal_reapply text,
    p_dry_run boolean, p_batch_id text
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_source harvest.executions;
    v_problems text[];
    v_fork_id uuid;
    v_now timestamptz := harvest.now();
    v_pending_signals integer;
    v_signal record;
    v_plan jsonb;
    v_renamed jsonb;
    v_slot harvest.workflow_slots;
    v_gate record;
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'a reset needs a reason' USING ERRCODE = 'HR001',
            HINT = 'say why, e.g. --reason "recover from bad deploy 2026-05-03"';
    END IF;
    PERFORM harvest._check_signal_reapply(p_signal_reapply);
    -- The key's start lock before the run's row, as every start takes them: a start of the
    -- key waiting on the row would otherwise read the run this reset terminates and miss
    -- its fork (a statement's snapshot predates the fork), then attach to the ended run or
    -- collide with the fork in executions_active_workflow_id.
    PERFORM harvest._lock_start_key(e.workflow_name, e.workflow_id)
    FROM harvest.executions AS e WHERE e.id = p_execution_id;
    v_source := harvest._lock_execution(p_execution_id);
    PERFORM harvest._refuse_moved(v_source, 'reset');
    v_problems := harvest._reset_problems(v_source, p_to_event);
    SELECT count(*) INTO v_pending_signals FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_id > p_to_event AND ev.event_type = 'SignalReceived';
    v_plan := jsonb_build_object(
        'valid', cardinality(v_problems) = 0, 'problems', to_jsonb(v_problems),
        'source_execution_id', p_execution_id, 'to_event', p_to_event,
        'carried_events', least(greatest(p_to_event, 0), v_source.last_event_id),
        'discarded_events', greatest(v_source.last_event_id - greatest(p_to_event, 0), 0),
        'signal_reapply', p_signal_reapply, 'pending_signals', v_pending_signals,
        'dry_run', p_dry_run, 'new_execution_id', NULL);
    IF p_dry_run THEN
        RETURN v_plan;
    END IF;
    IF cardinality(v_problems) > 0 THEN
        RAISE EXCEPTION 'cannot reset execution % to event %: %', p_execution_id, p_to_event,
            array_to_string(v_problems, '; ') USING ERRCODE = CASE
                WHEN v_source.status <> 'RUNNING' THEN 'HR005' ELSE 'HR001' END,
            HINT = 'run it with dry_run first; harvest workflow stack shows the wait state';
    END IF;

    -- The source's concurrency slot, or its first task's gate if not admitted yet, before
    -- its close gives the one back and drops the other: the fork takes them over below.
    SELECT * INTO v_slot FROM harvest.workflow_slots AS s WHERE s.execution_id = p_execution_id;
    SELECT t.concurrency_key, t.concurrency_limit INTO v_gate FROM harvest.tasks AS t
    WHERE t.execution_id = p_execution_id AND t.kind = 'workflow' AND t.concurrency_key IS NOT NULL;
    PERFORM harvest._append_event(p_execution_id, 'WorkflowTerminated', jsonb_build_object(
        'reason', 'reset to event ' || p_to_event || ': ' || p_reason, 'operator_id', p_operator_id));
    PERFORM harvest._close_execution(p_execution_id, 'TERMINATED', NULL, jsonb_build_object(
        'error_type', 'Reset', 'message', 'reset to event ' || p_to_event || ': ' || p_reason,
        'non_retryable', true, 'details', jsonb_build_object('operator_id', p_operator_id)));

    -- This database's shard: a moved run's id names its origin shard.
    v_fork_id := harvest._new_execution_id(harvest.get_shard_id());
    -- The offloaded payloads the fork carries (its input, the carried events, the signals it
    -- takes over) are copied under new ids that the fork owns, and its references renamed:
    -- the source's erasure or deletion must not take the fork's history with it. Only the
    -- source's own rows: a reference is JSON a starter or a sender wrote, and a copy of a row
    -- not the source's (another run's, or a run-less one: another client's held-back start's
    -- input) would outlive its erasure; such a reference stays as written.
    SELECT coalesce(jsonb_object_agg(r.id, gen_random_uuid()), '{}'::jsonb) INTO v_renamed
    FROM (
        SELECT harvest._payload_refs(v_source.input) AS id
        UNION
        SELECT harvest._payload_refs(ev.event_data) FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution_id
          AND (ev.event_id <= p_to_event OR (p_signal_reapply = 'buffer' AND ev.event_type = 'SignalReceived'))
    ) AS r
    WHERE EXISTS (SELECT 1 FROM harvest.payloads AS p WHERE p.id = r.id AND p.execution_id = p_execution_id);
    INSERT INTO harvest.executions (
        id, workflow_name, workflow_id, queue, input, search_attributes, created_at,
        execution_timeout_at, timeout_at, run_timeout_secs, concurrency_key, quota_key,
        last_event_id, history_bytes
    )
    -- The fork keeps the source's deadlines and its flow-control keys (per-key
    -- concurrency and quotas count it like the run it replaces).
    SELECT v_fork_id, s.workflow_name, s.workflow_id, s.queue, harvest._renamed_refs(s.input, v_renamed),
           s.search_attributes, v_now,
           s.execution_timeout_at, s.timeout_at, s.run_timeout_secs, s.concurrency_key, s.quota_key,
           p_to_event,
           (SELECT coalesce(sum(harvest._event_bytes(ev.event_data)), 0) FROM harvest.events AS ev
            WHERE ev.execution_id = s.id AND ev.event_id <= p_to_event)
    FROM harvest.executions AS s WHERE s.id = p_execution_id;
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT v_fork_id, ev.event_id, ev.event_type, harvest._renamed_refs(ev.event_data, v_renamed), ev.created_at
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_id <= p_to_event;
    PERFORM harvest._copy_payloads(v_renamed, v_fork_id, v_now);
    PERFORM harvest._append_event(v_fork_id, 'WorkflowResetFork', jsonb_build_object(
        'source_execution_id', p_execution_id, 'to_event', p_to_event, 'reason', p_reason,
        'operator_id', p_operator_id, 'signal_reapply', p_signal_reapply)
        || CASE WHEN p_batch_id IS NOT NULL THEN jsonb_build_object('batch_id', p_batch_id) ELSE '{}'::jsonb END);
    IF p_signal_reapply = 'buffer' THEN
        FOR v_signal IN
            SELECT ev.event_data FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution_id AND ev.event_id > p_to_event
              AND ev.event_type = 'SignalReceived'
            ORDER BY ev.event_id
        LOOP
            PERFORM harvest._append_event(v_fork_id, 'SignalReceived',
                                          harvest._renamed_refs(v_signal.event_data, v_renamed));
        END LOOP;
    END IF;
    PERFORM harvest._ensure_workflow_task(v_fork_id);
    IF v_slot.execution_id IS NOT NULL THEN
        INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)
        VALUES (v_fork_id, v_slot.concurrency_key, v_slot.workflow_name, v_slot.admitted_at);
    ELSIF v_gate.concurrency_key IS NOT NULL THEN
        UPDATE harvest.tasks AS t
        SET concurrency_key = v_gate.concurrency_key, concurrency_limit = v_gate.concurrency_limit
        WHERE t.execution_id = v_fork_id AND t.kind = 'workflow';
    END IF;
    PERFORM harvest._audit('workflow.reset', p_execution_id::text, p_operator_id, jsonb_strip_nulls(jsonb_build_object(
        'reason', p_reason, 'to_event', p_to_event, 'signal_reapply', p_signal_reapply,
        'new_execution_id', v_fork_id, 'batch_id', p_batch_id)));
    RETURN v_plan || jsonb_build_object('new_execution_id', v_fork_id);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.reset_workflow IS
'Recover a running top-level run stuck on history its code can no longer replay: it ends TERMINATED and a fork '
'carrying the history through p_to_event runs under the current code; audited, p_dry_run only reports the plan; '
'an invalid point raises HR001, a terminal run HR005. For admins (role harvest_admin).';
