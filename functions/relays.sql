-- Relays: effects on another execution, delivered without waiting on its lock.
--
-- A child's end must reach its parent, and a parent's end its children. Locking
-- two executions in one transaction would invite deadlocks (child then parent
-- here, parent then child there), so the cause writes a relay row and tries to
-- deliver it at once with SKIP LOCKED; a busy target gets it from the next
-- scanner pass (deliver_relays). Delivery checks the target is still RUNNING, so
-- delivering twice or late is harmless; a parent_closed relay to a child that continued
-- as new meanwhile goes on to its successor, which keeps the parent link.
--
-- External signals and cancels (ctx.signal_external_workflow,
-- ctx.cancel_external_workflow) are relays too, of kinds external_signal and
-- external_cancel: the decision records the command's event and writes the row;
-- delivery applies the effect to the target as signal_workflow / cancel_workflow
-- would (_apply_external) and reports the outcome to the source as an event
-- (_settle_external), in one transaction. A row this database cannot settle alone
-- is `remote` and waits for the cross-shard pump, which calls
-- claim_remote_relays here, deliver_external_relay on the target's shard, then
-- complete_relay (or release_relay) here (docs/internals.md, "Relays across shards").

CREATE OR REPLACE FUNCTION harvest._queue_relay(p_target uuid, p_kind text, p_payload jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay_id bigint;
BEGIN
    INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at)
    VALUES (p_target, p_kind, p_payload, harvest.now())
    RETURNING id INTO v_relay_id;
    PERFORM harvest._deliver_relay(v_relay_id);
END;
$$;

-- Deliver one relay if its target can be locked without waiting; true when done.
CREATE OR REPLACE FUNCTION harvest._deliver_relay(p_relay_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay harvest.relays;
    v_target harvest.executions;
    v_status text;
BEGIN
    SELECT * INTO v_relay FROM harvest.relays WHERE id = p_relay_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR v_relay.remote THEN
        RETURN false;
    END IF;
    IF v_relay.kind IN ('external_signal', 'external_cancel') THEN
        RETURN harvest._deliver_external(v_relay);
    END IF;
    SELECT * INTO v_target FROM harvest.executions WHERE id = v_relay.target_execution_id
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Locked elsewhere (retry later) or gone (drop the relay).
        IF EXISTS (SELECT 1 FROM harvest.executions WHERE id = v_relay.target_execution_id) THEN
            RETURN false;
        END IF;
        DELETE FROM harvest.relays WHERE id = p_relay_id;
        RETURN true;
    END IF;
    DELETE FROM harvest.relays WHERE id = p_relay_id;
    IF v_relay.kind = 'parent_closed' AND v_target.status = 'CONTINUED_AS_NEW'
       AND v_target.output ->> 'continued_as_new' IS NOT NULL THEN
        -- The child rotated after its parent closed, before the policy reached it (its row
        -- was busy): its successor inherited the parent link, so the policy is its.
        PERFORM harvest._queue_relay((v_target.output ->> 'continued_as_new')::uuid, v_relay.kind, v_relay.payload);
        RETURN true;
    END IF;
    IF v_target.status NOT IN ('RUNNING', 'PAUSED') THEN  -- a paused run records it (lifecycle.sql)
        RETURN true;
    END IF;
    IF v_relay.kind = 'child_closed' THEN
        v_status := v_relay.payload ->> 'status';
        IF v_status = 'COMPLETED' THEN
            PERFORM harvest._append_event(v_target.id, 'ChildWorkflowCompleted', jsonb_build_object(
                'seq', v_relay.payload -> 'seq', 'child_execution_id', v_relay.payload -> 'child_execution_id',
                'result', v_relay.payload -> 'result'));
        ELSE
            PERFORM harvest._append_event(v_target.id, 'ChildWorkflowFailed', jsonb_build_object(
                'seq', v_relay.payload -> 'seq', 'child_execution_id', v_relay.payload -> 'child_execution_id',
                'status', v_status, 'failure', v_relay.payload -> 'failure'));
        END IF;
        PERFORM harvest._ensure_workflow_task(v_target.id);
    ELSIF v_relay.payload ->> 'policy' = 'terminate' THEN
        PERFORM harvest._append_event(v_target.id, 'WorkflowTerminated',
            jsonb_build_object('reason', 'parent ' || (v_relay.payload ->> 'parent_execution_id') || ' closed'));
        PERFORM harvest._close_execution(v_target.id, 'TERMINATED', NULL, jsonb_build_object(
            'error_type', 'Terminated', 'message', 'the parent workflow closed', 'non_retryable', true,
            'details', NULL));
    ELSIF v_relay.payload ->> 'policy' = 'request_cancel' AND NOT v_target.cancel_requested THEN
        UPDATE harvest.executions SET cancel_requested = true WHERE id = v_target.id;
        PERFORM harvest._append_event(v_target.id, 'WorkflowCancelRequested',
            jsonb_build_object('reason', 'the parent workflow closed'));
        PERFORM harvest._ensure_workflow_task(v_target.id);
    END IF;
    RETURN true;
END;
$$;

-- The scanner's pass over relays whose immediate delivery found the target busy.
CREATE OR REPLACE FUNCTION harvest.deliver_relays(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay_id bigint;
    v_delivered integer := 0;
BEGIN
    PERFORM harvest._check_limit('deliver_relays', p_limit, 10000);
    FOR v_relay_id IN SELECT r.id FROM harvest.relays AS r WHERE NOT r.remote ORDER BY r.id LIMIT p_limit LOOP
        IF harvest._deliver_relay(v_relay_id) THEN
            v_delivered := v_delivered + 1;
        END IF;
    END LOOP;
    RETURN v_delivered;
END;
$$;

-- ------------------------------------------------------------ external signal and cancel

-- Every workflow name this database holds a run of, read off the executions_name_created
-- index one probe per name (a loose index scan), for a business key given without its name.
CREATE OR REPLACE FUNCTION harvest._workflow_names()
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE names (workflow_name) AS (
        (SELECT e.workflow_name FROM harvest.executions AS e ORDER BY e.workflow_name LIMIT 1)
        UNION ALL
        SELECT (SELECT e.workflow_name FROM harvest.executions AS e
                WHERE e.workflow_name > n.workflow_name ORDER BY e.workflow_name LIMIT 1)
        FROM names AS n WHERE n.workflow_name IS NOT NULL
    )
    SELECT coalesce(array_agg(n.workflow_name), ARRAY[]::text[]) FROM names AS n WHERE n.workflow_name IS NOT NULL;
$$;

-- Where an external target is on this database: the run that is current for an
-- execution id (following continue-as-new successors, as a client's signal does)
-- or for a business key (the RUNNING run of workflow_id, of workflow_name when
-- given). outcome: found (execution_id is a RUNNING run), not_found (also a chain whose
-- successor is gone: execution_id is its last run, CONTINUED_AS_NEW), not_running
-- (execution_id: the run found, ended), ambiguous (workflow_id alone matches
-- several running runs of different names), wrong_shard (no row here, and the id
-- was minted for another shard), moved (execution_id's row here is a rebalance's
-- seal: its migrated_to_shard names where it lives) or busy (a staged copy a move
-- is bringing here, not active yet: try again). A row present here is the run,
-- whatever shard its id was minted for (a rebalance moved it here). A business key
-- skips seals: the live copy answers on its own shard. Reads without locking.
CREATE OR REPLACE FUNCTION harvest._locate_external_target(
    p_execution_id uuid, p_workflow_name text, p_workflow_id text,
    OUT outcome text, OUT execution_id uuid, OUT message text
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_local integer := harvest.get_shard_id();
    v_run record;
    v_count integer;
    v_hops integer := 0;
    v_last uuid;  -- the run the walk came from (a continue-as-new predecessor)
    v_names text[];
    v_candidate record;
    v_latest_id uuid;
    v_latest_at timestamptz;
    v_latest_status text;
    v_moving uuid;
BEGIN
    IF p_execution_id IS NOT NULL THEN
        execution_id := p_execution_id;
        LOOP
            SELECT e.status, e.output, e.migrated_to_shard INTO v_run
            FROM harvest.executions AS e WHERE e.id = execution_id;
            IF NOT FOUND AND v_hops = 0 AND harvest.shard_of(p_execution_id) <> v_local THEN
                outcome := 'wrong_shard';
                message := format('execution %s belongs to shard %s, not to this database (shard %s)',
                                  p_execution_id, harvest.shard_of(p_execution_id), v_local);
                RETURN;
            END IF;
            IF NOT FOUND AND v_hops > 0 THEN
                -- A broken chain: its last run continued as new and the successor was erased by
                -- hand or purged (a successor is minted here, with its predecessor's close, so
                -- it is not elsewhere). No run is current, and none will be: not_found, naming
                -- that last run (it read not_running, naming the run that is not there).
                outcome := 'not_found';
                message := format('execution %s: its continue-as-new chain ends at run %s, which continued as '
                                  'new as run %s, and that run is not on this shard (%s) (erased or purged): no '
                                  'run of the chain is current, and none will be', p_execution_id, v_last,
                                  execution_id, v_local);
                execution_id := v_last;
                RETURN;
            END IF;
            IF NOT FOUND THEN
                outcome := 'not_found';
                message := format('execution %s does not exist', execution_id);
                RETURN;
            END IF;
            IF v_run.status IN ('MIGRATED', 'MIGRATING') THEN
                outcome := CASE WHEN v_run.migrated_to_shard IS NOT NULL THEN 'moved' ELSE 'busy' END;
                message := CASE WHEN v_run.migrated_to_shard IS NOT NULL
                    THEN format('execution %s moved to shard %s', execution_id, v_run.migrated_to_shard)
                    ELSE format('execution %s is being moved to this shard (shard %s) and is not active yet',
                                execution_id, v_local) END;
                RETURN;
            END IF;
            EXIT WHEN v_run.status <> 'CONTINUED_AS_NEW' OR v_run.output ->> 'continued_as_new' IS NULL
                      OR v_hops >= 100;
            v_last := execution_id;
            execution_id := (v_run.output ->> 'continued_as_new')::uuid;
            v_hops := v_hops + 1;
        END LOOP;
        IF v_run.status IN ('RUNNING', 'PAUSED') THEN
            outcome := 'found';
        ELSIF v_run.status = 'CONTINUED_AS_NEW' AND v_run.output ->> 'continued_as_new' IS NOT NULL THEN
            -- (the walk's bound: a chain that long is named by its business key)
            outcome := 'not_running';
            message := format('execution %s continued as new more than 100 times: name its current run '
                              'by workflow_id (ExternalWorkflow(workflow_id=%L))', p_execution_id,
                              (SELECT e.workflow_id FROM harvest.executions AS e WHERE e.id = execution_id));
        ELSE
            outcome := 'not_running';
            message := format('execution %s is already %s', execution_id, v_run.status);
        END IF;
        RETURN;
    END IF;
    -- A workflow_id alone is looked for under every workflow name: the names are read
    -- off an index one probe each (a loose index scan), then each (name, workflow_id) is
    -- one probe, written as start_workflow's prior lookup is (start.sql,
    -- _start_resolve_prior: its running run first, else its latest), which keeps its
    -- index (executions_workflow_id_runs, the id then the name) in every plan.
    v_names := CASE WHEN p_workflow_name IS NOT NULL THEN ARRAY[p_workflow_name]
                    ELSE harvest._workflow_names() END;
    v_count := 0;
    FOR v_candidate IN
        SELECT r.id, r.status, r.created_at FROM unnest(v_names) AS n (workflow_name)
        CROSS JOIN LATERAL (
            SELECT e.id, e.status, e.created_at FROM harvest.executions AS e
            WHERE e.workflow_id = p_workflow_id AND e.workflow_name BETWEEN n.workflow_name AND n.workflow_name
              AND NOT (e.status IN ('MIGRATED', 'MIGRATING') AND e.migrated_to_shard IS NOT NULL)
            ORDER BY e.workflow_name, (e.status IN ('RUNNING', 'PAUSED')) DESC, e.created_at DESC
            LIMIT 1
        ) AS r
    LOOP
        IF v_candidate.status = 'MIGRATING' THEN
            v_moving := v_candidate.id;
        ELSIF v_candidate.status IN ('RUNNING', 'PAUSED') THEN
            v_count := v_count + 1;
            execution_id := v_candidate.id;
        ELSIF v_latest_id IS NULL OR (v_candidate.created_at, v_candidate.id) > (v_latest_at, v_latest_id) THEN
            v_latest_id := v_candidate.id;
            v_latest_at := v_candidate.created_at;
            v_latest_status := v_candidate.status;
        END IF;
    END LOOP;
    IF v_count = 1 THEN
        outcome := 'found';
        RETURN;
    END IF;
    IF v_count = 0 AND v_moving IS NOT NULL THEN
        outcome := 'busy';
        execution_id := v_moving;
        message := format('the run of workflow_id %s is being moved to this shard and is not active yet',
                          p_workflow_id);
        RETURN;
    END IF;
    IF v_count > 1 THEN
        outcome := 'ambiguous';
        execution_id := NULL;
        message := format('%s running workflows have workflow_id %s: name the workflow too', v_count,
                          p_workflow_id);
        RETURN;
    END IF;
    IF v_latest_id IS NOT NULL THEN
        outcome := 'not_running';
        execution_id := v_latest_id;
        message := format('no run of workflow_id %s%s is running (the latest, %s, is %s)', p_workflow_id,
                          coalesce(' (' || p_workflow_name || ')', ''), v_latest_id, v_latest_status);
    ELSE
        outcome := 'not_found';
        message := format('no run of workflow_id %s%s exists', p_workflow_id,
                          coalesce(' (' || p_workflow_name || ')', ''));
    END IF;
END;
$$;

-- Apply an external signal or cancel to its target on this database, as
-- signal_workflow / cancel_workflow would: the signal is a SignalReceived event
-- that names its sender (sender_execution_id), the cancel a WorkflowCancelRequested
-- once per run (audited). The target is locked SKIP LOCKED unless p_wait. outcome:
-- delivered, already_requested (a cancel asked before), busy (the target is
-- locked elsewhere, or a staged copy not active yet: nothing was done, try again),
-- or _locate_external_target's not_found, not_running, ambiguous, wrong_shard,
-- moved (a seal here: the run lives on its migrated_to_shard).
CREATE OR REPLACE FUNCTION harvest._apply_external(
    p_kind text, p_execution_id uuid, p_workflow_name text, p_workflow_id text, p_payload jsonb,
    p_source_execution_id uuid, p_signal_id text, p_wait boolean,
    OUT outcome text, OUT execution_id uuid, OUT message text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_where record;
    v_target harvest.executions;
BEGIN
    -- A run found RUNNING may end before it is locked: look again (a successor, a new run).
    FOR v_attempt IN 1..3 LOOP
        v_where := harvest._locate_external_target(p_execution_id, p_workflow_name, p_workflow_id);
        outcome := v_where.outcome;
        execution_id := v_where.execution_id;
        message := v_where.message;
        IF outcome <> 'found' THEN
            RETURN;
        END IF;
        IF p_wait THEN
            SELECT * INTO v_target FROM harvest.executions AS e WHERE e.id = v_where.execution_id FOR UPDATE;
        ELSE
            SELECT * INTO v_target FROM harvest.executions AS e WHERE e.id = v_where.execution_id
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                outcome := 'busy';
                RETURN;
            END IF;
        END IF;
        EXIT WHEN v_target.status IN ('RUNNING', 'PAUSED');
    END LOOP;
    IF v_target.status IS NULL OR v_target.status NOT IN ('RUNNING', 'PAUSED') THEN
        outcome := 'not_running';
        message := format('execution %s is already %s', execution_id, v_target.status);
        RETURN;
    END IF;
    -- A run a rebalance moved here left the receipts of the relays it was given behind, on
    -- the shard that applied them; its history came with it. A relay it already holds
    -- (the same signal_id) is delivered, not appended twice. Runs that never moved skip this.
    IF p_kind = 'external_signal' AND cardinality(v_target.migrated_from_shards) > 0
       AND EXISTS (SELECT 1 FROM harvest.events AS ev
                   WHERE ev.execution_id = v_target.id AND ev.event_type = 'SignalReceived'
                     AND ev.event_data ->> 'signal_id' = p_signal_id) THEN
        outcome := 'delivered';
        RETURN;
    END IF;
    IF p_kind = 'external_signal' THEN
        PERFORM harvest._append_event(v_target.id, 'SignalReceived', jsonb_build_object(
            'name', p_payload ->> 'signal_name', 'payload', coalesce(p_payload -> 'payload', 'null'::jsonb),
            'signal_id', p_signal_id, 'sender_execution_id', p_source_execution_id)
            || CASE WHEN p_payload ? 'traceparent' THEN jsonb_build_object('traceparent', p_payload -> 'traceparent')
                    ELSE '{}'::jsonb END);
        PERFORM harvest._ensure_workflow_task(v_target.id);
        outcome := 'delivered';
        RETURN;
    END IF;
    PERFORM harvest._audit('workflow.cancel', v_target.id::text, NULL, jsonb_build_object(
        'reason', p_payload ->> 'reason', 'workflow_name', v_target.workflow_name,
        'already_requested', v_target.cancel_requested, 'requested_by', p_source_execution_id));
    IF v_target.cancel_requested THEN
        outcome := 'already_requested';
        RETURN;
    END IF;
    UPDATE harvest.executions AS e SET cancel_requested = true WHERE e.id = v_target.id;
    PERFORM harvest._append_event(v_target.id, 'WorkflowCancelRequested',
        jsonb_build_object('reason', p_payload -> 'reason'));
    PERFORM harvest._ensure_workflow_task(v_target.id);
    outcome := 'delivered';
END;
$$;

-- Report an external relay's outcome to its source run (locked by the caller), as
-- an ExternalSignalDelivered / ExternalCancelDelivered or ...Failed{reason} event
-- that wakes it, and drop the row. A source that has ended hears nothing.
CREATE OR REPLACE FUNCTION harvest._settle_external(
    p_relay harvest.relays, p_outcome text, p_execution_id uuid, p_message text
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_signal boolean := p_relay.kind = 'external_signal';
BEGIN
    DELETE FROM harvest.relays AS r WHERE r.id = p_relay.id;
    PERFORM harvest._report_external(p_relay.source_execution_id, p_relay.source_seq, v_signal,
                                     p_outcome, p_execution_id, p_message);
END;
$$;

-- Append an external command's outcome to its (locked) source run, if it runs.
CREATE OR REPLACE FUNCTION harvest._report_external(
    p_source_execution_id uuid, p_seq integer, p_signal boolean, p_outcome text, p_execution_id uuid,
    p_message text
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM harvest.executions AS e
                   WHERE e.id = p_source_execution_id AND (e.status IN ('RUNNING', 'PAUSED')) IS TRUE) THEN
        RETURN;
    END IF;
    IF p_outcome IN ('delivered', 'already_requested') THEN
        PERFORM harvest._append_event(p_source_execution_id,
            CASE WHEN p_signal THEN 'ExternalSignalDelivered' ELSE 'ExternalCancelDelivered' END,
            CASE WHEN p_signal THEN jsonb_build_object('seq', p_seq, 'execution_id', p_execution_id)
                 ELSE jsonb_build_object('seq', p_seq, 'execution_id', p_execution_id,
                                         'already_requested', p_outcome = 'already_requested') END);
    ELSE
        PERFORM harvest._append_event(p_source_execution_id,
            CASE WHEN p_signal THEN 'ExternalSignalFailed' ELSE 'ExternalCancelFailed' END,
            jsonb_build_object('seq', p_seq, 'execution_id', p_execution_id, 'reason', p_outcome,
                               'message', p_message));
    END IF;
    PERFORM harvest._ensure_workflow_task(p_source_execution_id);
END;
$$;

-- Deliver one local external relay (locked by _deliver_relay): lock its source
-- without waiting (the deciding transaction already holds it), apply the effect
-- without waiting on the target, report back. false when either was busy. A target
-- that is not here after all (its row a rebalance's seal, or gone from a shard its
-- id does not name) turns the row remote toward the shard it lives on when
-- cross_shard_relays is on, for the pump; with it off, it is reported wrong_shard.
CREATE OR REPLACE FUNCTION harvest._deliver_external(p_relay harvest.relays)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_applied record;
    v_shard integer;
BEGIN
    PERFORM 1 FROM harvest.executions AS e WHERE e.id = p_relay.source_execution_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM harvest.executions AS e WHERE e.id = p_relay.source_execution_id) THEN
        RETURN false;
    END IF;
    v_applied := harvest._apply_external(p_relay.kind, p_relay.target_execution_id, p_relay.target_workflow_name,
        p_relay.target_workflow_id, p_relay.payload, p_relay.source_execution_id,
        harvest.get_shard_id() || ':' || p_relay.id, false);
    IF v_applied.outcome = 'busy' THEN
        RETURN false;
    END IF;
    IF v_applied.outcome IN ('moved', 'wrong_shard') THEN
        v_shard := coalesce((SELECT e.migrated_to_shard FROM harvest.executions AS e
                             WHERE e.id = v_applied.execution_id), harvest.shard_of(p_relay.target_execution_id));
        IF coalesce((SELECT s.cross_shard_relays FROM harvest.engine_settings AS s WHERE s.id), false) THEN
            UPDATE harvest.relays AS r SET remote = true, target_shard = v_shard WHERE r.id = p_relay.id;
            RETURN false;
        END IF;
        PERFORM harvest._settle_external(p_relay, 'wrong_shard', v_applied.execution_id,
            v_applied.message || ', and this database relays to no other shard '
            || '(harvest.engine_settings.cross_shard_relays is off)');
        RETURN true;
    END IF;
    PERFORM harvest._settle_external(p_relay, v_applied.outcome, v_applied.execution_id, v_applied.message);
    RETURN true;
END;
$$;

-- The command of a decision (decide.sql) for an external signal or cancel: its
-- Requested event, then the relay. An id whose row is here is local, whatever shard
-- it was minted for (a rebalance moved the run here); a row here that is a seal
-- (the run moved away) points at the shard to relay to. A target this database
-- cannot settle alone (a run on another shard, or any business key, when
-- cross_shard_relays is on) waits for the cross-shard pump; with it off, a run on
-- another shard is reported wrong_shard at once and a business key is resolved here.
CREATE OR REPLACE FUNCTION harvest._decide_external(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_kind text, p_event_data jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_target_id uuid;
    v_workflow_id text := p_command ->> 'workflow_id';
    v_workflow_name text := p_command ->> 'workflow_name';
    v_local integer := harvest.get_shard_id();
    v_shard integer;
    v_cross boolean := coalesce(
        (SELECT s.cross_shard_relays FROM harvest.engine_settings AS s WHERE s.id), false);
    v_remote boolean;
    v_relay_id bigint;
    v_here record;
    v_found boolean;
BEGIN
    IF jsonb_typeof(p_command -> 'execution_id') = 'string' THEN
        BEGIN
            v_target_id := (p_command ->> 'execution_id')::uuid;
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'command % needs "execution_id" as a UUID, got %', p_command ->> 'type',
                p_command ->> 'execution_id' USING ERRCODE = 'HR001';
        END;
    END IF;
    IF (v_target_id IS NULL) = (coalesce(v_workflow_id, '') = '') THEN
        RAISE EXCEPTION 'command % needs its target as exactly one of "execution_id" and "workflow_id"',
            p_command ->> 'type' USING ERRCODE = 'HR001';
    END IF;
    IF v_target_id IS NOT NULL AND v_workflow_name IS NOT NULL THEN
        RAISE EXCEPTION 'command % names "workflow_name" with an "execution_id": a name goes with a workflow_id',
            p_command ->> 'type' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._append_event(p_execution.id,
        CASE p_kind WHEN 'external_signal' THEN 'ExternalSignalRequested' ELSE 'ExternalCancelRequested' END,
        jsonb_build_object('seq', p_seq, 'execution_id', v_target_id, 'workflow_id', v_workflow_id,
                           'workflow_name', v_workflow_name) || p_event_data);
    v_shard := harvest.shard_of(v_target_id);
    SELECT e.status, e.migrated_to_shard INTO v_here FROM harvest.executions AS e WHERE e.id = v_target_id;
    v_found := FOUND;
    IF v_found THEN
        v_shard := CASE WHEN v_here.status IN ('MIGRATED', 'MIGRATING') AND v_here.migrated_to_shard IS NOT NULL
                        THEN v_here.migrated_to_shard ELSE v_local END;
    END IF;
    IF v_target_id IS NOT NULL AND v_shard <> v_local AND NOT v_cross THEN
        PERFORM harvest._report_external(p_execution.id, p_seq, p_kind = 'external_signal', 'wrong_shard',
            v_target_id, format('execution %s %s shard %s, and this database (shard %s) relays to no '
                                'other shard (harvest.engine_settings.cross_shard_relays is off)',
                                v_target_id, CASE WHEN v_found THEN 'moved to' ELSE 'belongs to' END, v_shard,
                                v_local));
        RETURN;
    END IF;
    v_remote := v_cross AND (v_target_id IS NULL OR v_shard <> v_local);
    INSERT INTO harvest.relays (
        target_execution_id, kind, payload, created_at, source_execution_id, source_seq,
        target_workflow_id, target_workflow_name, target_shard, remote
    ) VALUES (
        v_target_id, p_kind, p_event_data, harvest.now(), p_execution.id, p_seq,
        v_workflow_id, v_workflow_name, v_shard, v_remote
    ) RETURNING id INTO v_relay_id;
    IF NOT v_remote THEN
        PERFORM harvest._deliver_relay(v_relay_id);
    END IF;
END;
$$;

-- The cross-shard pump's claim on this (the source) shard: up to p_limit remote
-- relays not claimed by a live lease, oldest first, each leased for p_lease_secs
-- (a pump that dies loses nothing: the lease runs out and the row is claimed
-- again) and its attempts counted.
CREATE OR REPLACE FUNCTION harvest.claim_remote_relays(p_limit integer DEFAULT 100, p_lease_secs double precision DEFAULT 30)
RETURNS TABLE (
    relay_id bigint, kind text, target_shard integer, target_execution_id uuid, target_workflow_name text,
    target_workflow_id text, payload jsonb, source_shard integer, source_execution_id uuid, attempts integer
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
    -- rows, a generic plan made while the table was small read every relay to update a few.)
    RETURN QUERY
    UPDATE harvest.relays AS r
    SET claimed_until = v_now + make_interval(secs => p_lease_secs), attempts = r.attempts + 1
    WHERE r.id = ANY(ARRAY(
        SELECT c.id FROM harvest.relays AS c
        WHERE c.remote AND (c.claimed_until IS NULL OR c.claimed_until <= v_now)
        ORDER BY c.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING r.id, r.kind, r.target_shard, r.target_execution_id, r.target_workflow_name, r.target_workflow_id,
              r.payload, harvest.get_shard_id(), r.source_execution_id, r.attempts;
END;
$$;

-- The cross-shard pump's delivery on a target shard: apply another shard's relay
-- (source shard p_source_shard, row p_relay_id) here, once. An outcome with an
-- effect (delivered, already_requested) is kept as a receipt, so a retry after a
-- lost answer returns it again and changes nothing; any other outcome (not_found,
-- not_running, ambiguous, wrong_shard) changed nothing and is looked up afresh.
-- A target whose row here is a rebalance's seal, or a staged copy not active yet,
-- is refused with HR013 (DETAIL shard_id: where it lives; null: try again), as
-- every id-routed call on a seal is, so the pump follows the pointer.
-- Waits for the target's lock (the pump holds no lock on this database).
CREATE OR REPLACE FUNCTION harvest.deliver_external_relay(
    p_source_shard integer, p_relay_id bigint, p_kind text, p_target_execution_id uuid,
    p_target_workflow_name text, p_target_workflow_id text, p_payload jsonb, p_source_execution_id uuid
)
RETURNS TABLE (outcome text, execution_id uuid, message text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_receipt harvest.relay_receipts;
    v_applied record;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('external_signal', 'external_cancel') THEN
        RAISE EXCEPTION 'relay kind "%" is not external_signal or external_cancel', p_kind USING ERRCODE = 'HR001';
    END IF;
    IF p_source_shard IS NULL OR p_relay_id IS NULL OR p_source_execution_id IS NULL THEN
        RAISE EXCEPTION 'a relay needs its source shard, relay id and source execution id' USING ERRCODE = 'HR001';
    END IF;
    IF (p_target_execution_id IS NULL) = (coalesce(p_target_workflow_id, '') = '') THEN
        RAISE EXCEPTION 'a relay targets exactly one of an execution id and a workflow_id' USING ERRCODE = 'HR001';
    END IF;
    IF p_kind = 'external_signal' THEN
        PERFORM harvest._check_payload(format('the payload of signal %s', p_payload ->> 'signal_name'),
                                       p_payload -> 'payload', harvest._payload_limit());
    END IF;
    -- Two pumps delivering the same relay at once wait here for each other.
    PERFORM pg_advisory_xact_lock(hashtextextended('harvest.relay:' || p_source_shard || ':' || p_relay_id, 0));
    SELECT * INTO v_receipt FROM harvest.relay_receipts AS r
    WHERE r.source_shard = p_source_shard AND r.relay_id = p_relay_id;
    IF FOUND THEN
        outcome := v_receipt.outcome;
        execution_id := v_receipt.target_execution_id;
        message := v_receipt.message;
        RETURN NEXT;
        RETURN;
    END IF;
    v_applied := harvest._apply_external(p_kind, p_target_execution_id, p_target_workflow_name,
        p_target_workflow_id, p_payload, p_source_execution_id, p_source_shard || ':' || p_relay_id, true);
    IF v_applied.outcome IN ('moved', 'busy') THEN
        RAISE EXCEPTION 'cannot deliver relay %:% to %', p_source_shard, p_relay_id, v_applied.message
            USING ERRCODE = 'HR013',
            DETAIL = jsonb_build_object('reason', 'migrated', 'execution_id', v_applied.execution_id,
                'shard_id', (SELECT e.migrated_to_shard FROM harvest.executions AS e
                             WHERE e.id = v_applied.execution_id), 'blockers', '[]'::jsonb)::text,
            HINT = 'deliver it where the run lives (the forwarding pointer), or retry';
    END IF;
    IF v_applied.outcome IN ('delivered', 'already_requested') THEN
        INSERT INTO harvest.relay_receipts (source_shard, relay_id, outcome, target_execution_id, message, received_at)
        VALUES (p_source_shard, p_relay_id, v_applied.outcome, v_applied.execution_id, v_applied.message,
                harvest.now());
    END IF;
    outcome := v_applied.outcome;
    execution_id := v_applied.execution_id;
    message := v_applied.message;
    RETURN NEXT;
END;
$$;

-- The cross-shard pump's report on the source shard: the relay's final outcome
-- (delivered, already_requested, not_found, not_running, ambiguous, wrong_shard)
-- reaches its source run as an event, and the row goes. false when the row is
-- gone (settled before: a retry of a settle changes nothing).
CREATE OR REPLACE FUNCTION harvest.complete_relay(
    p_relay_id bigint, p_outcome text, p_execution_id uuid DEFAULT NULL, p_message text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_source uuid;
    v_relay harvest.relays;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN (
        'delivered', 'already_requested', 'not_found', 'not_running', 'ambiguous', 'wrong_shard'
    ) THEN
        RAISE EXCEPTION 'relay outcome "%" is not final', p_outcome USING ERRCODE = 'HR001',
            HINT = 'use delivered, already_requested, not_found, not_running, ambiguous or wrong_shard; '
                   'an attempt that could not inspect a shard is release_relay';
    END IF;
    -- Lock order: the source execution, then the relay row.
    SELECT r.source_execution_id INTO v_source FROM harvest.relays AS r WHERE r.id = p_relay_id;
    PERFORM 1 FROM harvest.executions AS e WHERE e.id = v_source FOR UPDATE;
    SELECT * INTO v_relay FROM harvest.relays AS r WHERE r.id = p_relay_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_relay.kind NOT IN ('external_signal', 'external_cancel') THEN
        RAISE EXCEPTION 'relay % is a % relay, not an external signal or cancel', p_relay_id, v_relay.kind
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._settle_external(v_relay, p_outcome, p_execution_id, p_message);
    RETURN true;
END;
$$;

-- The cross-shard pump's report of an attempt that settled nothing (a shard it
-- could not inspect, a lost connection): the row stays, with p_error, and is
-- claimed again after min(attempts, 6) x 5 s.
CREATE OR REPLACE FUNCTION harvest.release_relay(p_relay_id bigint, p_error text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE harvest.relays AS r
    SET last_error = left(p_error, 2000),
        claimed_until = harvest.now() + make_interval(secs => least(r.attempts, 6) * 5)
    WHERE r.id = p_relay_id AND r.remote;
    RETURN FOUND;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.deliver_relays IS
'Deliver relays (a child''s end to its parent, a parent''s end to its children) whose immediate delivery found '
'the target busy; returns how many. Called by the scanner, harvest.scan (role harvest_worker).';
COMMENT ON FUNCTION harvest.claim_remote_relays IS
'The cross-shard pump''s claim: up to p_limit relays this database cannot settle alone (remote), oldest first, '
'leased for p_lease_secs, with this shard as source_shard. Called by the worker''s pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.deliver_external_relay IS
'On a target shard: apply another shard''s external signal or cancel relay once per (source shard, relay id); '
'returns the outcome (delivered, already_requested, not_found, not_running, ambiguous, wrong_shard). Called by '
'the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.complete_relay IS
'On the source shard: record a remote relay''s final outcome as an event of its source run and drop the row; '
'false when already settled. Called by the worker''s cross-shard pump (role harvest_worker).';
COMMENT ON FUNCTION harvest.release_relay IS
'On the source shard: an attempt that settled nothing keeps the relay with its error, claimed again after '
'min(attempts, 6) x 5 s. Called by the worker''s cross-shard pump (role harvest_worker).';
