-- Payloads (docs/payloads.md): the default offload store (put_payloads, get_payloads), erasure
-- of a terminal execution's payloads (erase_payloads) and legal holds (set_legal_hold,
-- release_legal_hold). Codecs run in the client and the worker: the database stores their
-- envelopes as JSON and never sees a key.

-- Store offloaded payloads; returns their ids in the order given.
CREATE OR REPLACE FUNCTION harvest.put_payloads(p_execution_id uuid, p_values jsonb[])
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    c_erased CONSTANT jsonb := '{"_harvest_erased": true}';
    v_ids uuid [];
    v_execution harvest.executions;
    v_erased boolean;
BEGIN
    IF p_values IS NULL OR cardinality(p_values) = 0 THEN
        RETURN '{}'::uuid [];
    END IF;
    IF p_execution_id IS NOT NULL THEN
        -- FOR KEY SHARE (the lock the foreign key takes at the insert anyway, taken before the
        -- read): an erase_payloads (FOR UPDATE) either waits for this call and then erases its
        -- rows too, or went first and this call reads the erased run.
        SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002',
                HINT = 'store a run''s payloads in its own database (the shard its id routes to)';
        END IF;
        -- A rebalance's seal or staged copy is not where the run's history is read: HR013 sends
        -- the writer on to the live run (the router follows the pointer).
        PERFORM harvest._refuse_moved(v_execution, 'store payloads of');
    END IF;
    IF array_position(p_values, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'put_payloads got a NULL payload' USING ERRCODE = 'HR001',
            HINT = 'pass each payload as a JSON value (JSON null is ''null''::jsonb)';
    END IF;
    -- (No size limit here, the offload store takes what is too large for a row: the depth's.)
    PERFORM harvest._check_depth(format('offloaded payload %s', v.n), v.value)
    FROM unnest(p_values) WITH ORDINALITY AS v (value, n);
    -- A run whose payloads were erased (erase_payloads replaced its input by the marker) gets
    -- its late rows (an activity attempt that outlived the run, its result offloaded before its
    -- completion is refused) stored erased: its payloads never come back after their erasure.
    v_erased := v_execution.input = jsonb_build_array(c_erased);
    WITH given AS (
        SELECT v.value, v.n, gen_random_uuid() AS id FROM unnest(p_values) WITH ORDINALITY AS v (value, n)
    ),

    stored AS (
        -- A run-less row is its storing login's to hand to a run (set_payloads_execution).
        INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login, erased_at)
        SELECT g.id, p_execution_id, harvest.now(), octet_length(g.value::text),
               CASE WHEN v_erased THEN c_erased ELSE g.value END,
               CASE WHEN p_execution_id IS NULL THEN session_user END,
               CASE WHEN v_erased THEN harvest.now() END
        FROM given AS g
        RETURNING id
    )

    SELECT array_agg(g.id ORDER BY g.n) INTO v_ids FROM given AS g WHERE g.id IN (SELECT s.id FROM stored AS s);
    RETURN v_ids;
END;
$$;

-- Give run-less offloaded payloads to the run that references them: a client stores a start's
-- large input before the run exists (put_payloads with no run), starts it and hands the rows to
-- it in the same transaction, so they go with the run and retention never takes them as
-- run-less. Rows another run owns are left alone. Returns how many rows changed.
CREATE OR REPLACE FUNCTION harvest.set_payloads_execution(p_ids uuid[], p_execution_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_execution_id IS NULL OR NOT EXISTS (SELECT 1 FROM harvest.executions WHERE id = p_execution_id) THEN
        RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002',
            HINT = 'hand payloads to a run of this database';
    END IF;
    -- Only the rows the caller's login stored (a row stored before 0083 has none): every
    -- reader can read run-less ids, and a row handed to another run goes with that run.
    UPDATE harvest.payloads AS p SET execution_id = p_execution_id
    WHERE p.id = ANY(p_ids) AND p.execution_id IS NULL AND coalesce(p.login, session_user) = session_user;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- The stored payloads of p_ids (an erased one is the erased marker; an unknown id is absent).
CREATE OR REPLACE FUNCTION harvest.get_payloads(p_ids uuid[])
RETURNS TABLE (id uuid, data jsonb)
LANGUAGE sql STABLE
AS $$
    SELECT p.id, p.data FROM harvest.payloads AS p WHERE p.id = ANY(p_ids);
$$;

-- A row's payload fields replaced by the erased marker: inputs, results, signal, query and
-- update payloads, a side effect's value, a local activity's result, and the details and
-- traceback of a failure (its error_type and message stay, as dead-letter filters and retry
-- policies read them; a local activity's failure is one too, and a DAG task's in its dag_node
-- marker). Redaction hides the same
-- fields (PAYLOAD_FIELDS in harvest/core/payload.py; a test holds the two equal).
CREATE OR REPLACE FUNCTION harvest._erase_payload_fields(p_data jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    c_erased CONSTANT jsonb := '{"_harvest_erased": true}';
    v_out jsonb := p_data;
    v_key text;
BEGIN
    IF p_data IS NULL OR jsonb_typeof(p_data) <> 'object' THEN
        RETURN p_data;
    END IF;
    FOREACH v_key IN ARRAY ARRAY['result', 'payload', 'arg', 'answer', 'details', 'traceback', 'heartbeat_details'] LOOP
        IF v_out ? v_key AND v_out -> v_key <> 'null'::jsonb THEN
            v_out := jsonb_set(v_out, ARRAY[v_key], c_erased);
        END IF;
    END LOOP;
    IF v_out ? 'input' THEN
        v_out := jsonb_set(v_out, '{input}', jsonb_build_array(c_erased));
    END IF;
    IF v_out ->> 'kind' = 'side_effect' AND v_out ? 'value' THEN
        v_out := jsonb_set(v_out, '{value}', c_erased);
    END IF;
    -- A local activity's marker holds its outcome, {name, result} or {name, failure}, and a DAG
    -- task's that did not run {task, state[, failure, reused_from]}: its result and its failure's
    -- payloads go, as a queued activity's do; its name, task and state stay (OUTCOME_MARKERS).
    IF v_out ->> 'kind' IN ('local_activity', 'dag_node') AND jsonb_typeof(v_out -> 'value') = 'object' THEN
        v_out := jsonb_set(v_out, '{value}', harvest._erase_payload_fields(v_out -> 'value'));
    END IF;
    FOREACH v_key IN ARRAY ARRAY['failure', 'last_failure', 'error'] LOOP
        IF jsonb_typeof(v_out -> v_key) = 'object' THEN
            v_out := jsonb_set(v_out, ARRAY[v_key], harvest._erase_payload_fields(v_out -> v_key));
        END IF;
    END LOOP;
    RETURN v_out;
END;
$$;

-- Copy offloaded payloads to a run that takes them over (a reset fork, a continue-as-new
-- successor), so that their first owner's retention or erasure does not take them from it:
-- p_renamed {old id: new id}, each copy p_owner's, with its size and, if it was erased, that.
-- By the primary key, one row each. The one copy both takers make (reset.sql, decide.sql).
CREATE OR REPLACE FUNCTION harvest._copy_payloads(p_renamed jsonb, p_owner uuid, p_now timestamptz)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, erased_at)
    SELECT (p_renamed ->> p.id::text)::uuid, p_owner, p_now, p.bytes, p.data, p.erased_at
    FROM harvest.payloads AS p
    WHERE p.id IN (SELECT k::uuid FROM jsonb_object_keys(p_renamed) AS k);
$$;

-- The offload references anywhere in p_data.
CREATE OR REPLACE FUNCTION harvest._payload_refs(p_data jsonb)
RETURNS SETOF uuid
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (r #>> '{}')::uuid FROM jsonb_path_query(coalesce(p_data, 'null'::jsonb), 'strict $.**._harvest_ref') AS r
    WHERE jsonb_typeof(r) = 'string' AND (r #>> '{}') ~ '^[0-9a-f-]{36}$';
$$;

-- Erase a terminal execution's payloads on this database: its input, output and failure
-- details, every event's payloads, its tasks', dead letters', query and update requests',
-- relays' and cross-shard children's, and the offloaded rows it owns (never one through a
-- reference alone). Refused (nothing changed) while a legal hold is
-- set (HR030) or the run is open (HR031), both judged on the live residence. On a MIGRATED seal
-- the call is refused with HR013 (the caller follows the pointer to the live run) unless
-- p_prior_residence: then the seal (a stale copy the run left, still holding its payloads) is
-- scrubbed without gates, and a residence retention already collected is no error
-- ({"absent": true}). Audited. Returns {execution_id, status, events, tasks, offloaded,
-- residences}: the shards the run lived on before (migrated_from_shards), for a sharded caller
-- to walk (docs/payloads.md).
CREATE OR REPLACE FUNCTION harvest.erase_payloads(
    p_execution_id uuid, p_operator_id text DEFAULT NULL, p_prior_residence boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    c_erased CONSTANT jsonb := '{"_harvest_erased": true}';
    v_execution harvest.executions;
    v_events integer;
    v_tasks integer;
    v_dead_letters integer;
    v_queries integer;
    v_offloaded integer;
    v_result jsonb;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id FOR UPDATE;
    IF NOT FOUND AND p_prior_residence THEN
        RETURN jsonb_build_object('execution_id', p_execution_id, 'absent', true, 'shard_id', harvest.get_shard_id());
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002',
            HINT = 'on a sharded deployment, call it on the shard the execution id routes to';
    END IF;
    IF p_prior_residence AND v_execution.status <> 'MIGRATED' THEN
        RAISE EXCEPTION 'execution % on shard % is not a prior residence (it is %)', p_execution_id,
            harvest.get_shard_id(), v_execution.status
            USING ERRCODE = 'HR001', HINT = 'erase the live run without p_prior_residence';
    END IF;
    IF NOT p_prior_residence THEN
        PERFORM harvest._refuse_moved(v_execution, 'erase the payloads of');
    END IF;
    IF NOT p_prior_residence AND EXISTS (SELECT 1 FROM harvest.legal_holds WHERE execution_id = p_execution_id) THEN
        RAISE EXCEPTION 'execution % is under a legal hold: its payloads cannot be erased', p_execution_id
            USING ERRCODE = 'HR030', HINT = 'an admin releases the hold first (release_legal_hold)';
    END IF;
    -- Only an ended run's payloads go: a PAUSED run is live (lifecycle.sql) and resumes with them.
    IF NOT p_prior_residence AND v_execution.status NOT IN (
        'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT', 'CONTINUED_AS_NEW'
    ) THEN
        RAISE EXCEPTION 'execution % is %: only a terminal execution''s payloads can be erased',
            p_execution_id, v_execution.status
            USING ERRCODE = 'HR031', HINT = 'wait for it to end, or cancel or terminate it first';
    END IF;

    UPDATE harvest.executions SET
        input = jsonb_build_array(c_erased),
        output = CASE WHEN status = 'COMPLETED' AND output IS NOT NULL THEN c_erased ELSE output END,
        failure = harvest._erase_payload_fields(failure)
    WHERE id = p_execution_id;
    UPDATE harvest.events SET event_data = harvest._erase_payload_fields(event_data)
    WHERE execution_id = p_execution_id AND event_data IS DISTINCT FROM harvest._erase_payload_fields(event_data);
    GET DIAGNOSTICS v_events = ROW_COUNT;
    UPDATE harvest.tasks SET
        input = CASE WHEN input IS NULL THEN NULL ELSE jsonb_build_array(c_erased) END,
        heartbeat_details = CASE WHEN heartbeat_details IS NULL THEN NULL ELSE c_erased END,
        last_failure = harvest._erase_payload_fields(last_failure)
    WHERE execution_id = p_execution_id;
    GET DIAGNOSTICS v_tasks = ROW_COUNT;
    UPDATE harvest.dead_letters SET
        input = CASE WHEN input IS NULL THEN NULL ELSE jsonb_build_array(c_erased) END,
        failure = harvest._erase_payload_fields(failure)
    WHERE execution_id = p_execution_id;
    GET DIAGNOSTICS v_dead_letters = ROW_COUNT;
    UPDATE harvest.query_requests SET
        arg = c_erased,
        answer = CASE WHEN answer IS NULL THEN NULL ELSE c_erased END,
        error = harvest._erase_payload_fields(error)
    WHERE execution_id = p_execution_id;
    GET DIAGNOSTICS v_queries = ROW_COUNT;
    -- Relays to or from it (a child's end, an external signal) and a cross-shard child's input
    -- copy held here.
    UPDATE harvest.relays SET payload = harvest._erase_payload_fields(payload)
    WHERE (target_execution_id = p_execution_id OR source_execution_id = p_execution_id)
        AND payload IS DISTINCT FROM harvest._erase_payload_fields(payload);
    UPDATE harvest.cross_shard_children SET input = jsonb_build_array(c_erased)
    WHERE child_execution_id = p_execution_id;
    -- The rows it owns, and no other: a reference is JSON any starter or sender can write, so
    -- one naming a row another run owns (a run under a legal hold) or a run-less one (another
    -- client's held-back start's input) must not erase it. Every row the engine stored for the
    -- run is its own by then: a start's input from the start's transaction on (a held-back
    -- start's from its release), a query's answer from its storing.
    UPDATE harvest.payloads SET data = c_erased, erased_at = harvest.now()
    WHERE execution_id = p_execution_id AND erased_at IS NULL;
    GET DIAGNOSTICS v_offloaded = ROW_COUNT;

    v_result := jsonb_build_object(
        'execution_id', p_execution_id, 'shard_id', harvest.get_shard_id(), 'status', v_execution.status,
        'events', v_events, 'tasks', v_tasks, 'dead_letters', v_dead_letters, 'queries', v_queries,
        'offloaded', v_offloaded,
        'residences', jsonb_build_object(
            'migrated_from_shards', to_jsonb(v_execution.migrated_from_shards),
            'migrated_to_shard', v_execution.migrated_to_shard));
    PERFORM harvest._audit('workflow.erase_payloads', p_execution_id::text, p_operator_id, v_result);
    RETURN v_result;
END;
$$;

-- A hold goes with its run when a rebalance moves it (rebalance.sql copies it and the cutover
-- drops the source's): while a move of the run is open (planned to verified, the copy maybe
-- taken) a hold is neither set nor released, so the hold the copy carries is the hold at the
-- cutover. HR013 (migration_in_progress): retry once the move has ended. The caller holds the
-- run's row lock, which begin_migration takes too.
CREATE OR REPLACE FUNCTION harvest._refuse_hold_while_moving(p_execution_id uuid, p_verb text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM harvest.shard_migrations AS m
               WHERE m.execution_id = p_execution_id AND m.phase IN ('planned', 'copied', 'verified')) THEN
        PERFORM harvest._raise_migration('migration_in_progress',
            format('execution %s is being moved to another shard: its legal hold cannot be %s now',
                   p_execution_id, CASE p_verb WHEN 'set' THEN 'set' ELSE 'released' END),
            p_execution_id, NULL, '{migration_in_progress}',
            'retry once the move has ended (harvest shard rebalance-resume settles a stalled one); the hold moves with the run');
    END IF;
END;
$$;

-- Set a legal hold on an execution (replacing the reason of one already set). A hold lives with
-- the live run: a seal refuses it with HR013, naming where the run lives.
CREATE OR REPLACE FUNCTION harvest.set_legal_hold(p_execution_id uuid, p_reason text, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'a legal hold needs a reason' USING ERRCODE = 'HR001',
            HINT = 'say why (a case number, a request), it is kept with the hold and in the audit log';
    END IF;
    -- The hold writes its run's row (an update that changes nothing, of a column no trigger
    -- watches), not only locks it: an erasure or a retention batch that took its snapshot before
    -- the hold committed cannot see the hold row, but it cannot lock a row written since its
    -- snapshot either (40001 in a REPEATABLE READ or SERIALIZABLE transaction), so it never
    -- destroys a run the hold was set on. (In READ COMMITTED each statement after the lock
    -- sees the hold: erase_payloads reads it then, run_retention checks again.)
    UPDATE harvest.executions AS e SET last_event_id = e.last_event_id WHERE e.id = p_execution_id
    RETURNING e.* INTO v_execution;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002';
    END IF;
    PERFORM harvest._refuse_moved(v_execution, 'set a legal hold on');
    PERFORM harvest._refuse_hold_while_moving(p_execution_id, 'set');
    INSERT INTO harvest.legal_holds (execution_id, reason, set_at, set_by)
    VALUES (p_execution_id, p_reason, harvest.now(), coalesce(p_operator_id, session_user))
    ON CONFLICT (execution_id) DO UPDATE SET reason = excluded.reason, set_at = excluded.set_at,
        set_by = excluded.set_by;
    PERFORM harvest._audit('workflow.legal_hold.set', p_execution_id::text, p_operator_id,
                           jsonb_build_object('reason', p_reason));
    RETURN jsonb_build_object('execution_id', p_execution_id, 'legal_hold', true, 'reason', p_reason);
END;
$$;

-- Release an execution's legal hold; returns whether one was set. A seal refuses with HR013 (the
-- hold lives with the live run). An unknown execution is HR002, unless a hold outlived its run
-- (retention does not stop at a hold): that hold is released.
CREATE OR REPLACE FUNCTION harvest.release_legal_hold(p_execution_id uuid, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reason text;
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id FOR UPDATE;
    IF FOUND THEN
        PERFORM harvest._refuse_moved(v_execution, 'release a legal hold on');
        PERFORM harvest._refuse_hold_while_moving(p_execution_id, 'release');
    END IF;
    DELETE FROM harvest.legal_holds WHERE execution_id = p_execution_id RETURNING reason INTO v_reason;
    IF v_execution.id IS NULL AND v_reason IS NULL THEN
        RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002';
    END IF;
    PERFORM harvest._audit('workflow.legal_hold.release', p_execution_id::text, p_operator_id,
                           jsonb_build_object('was_set', v_reason IS NOT NULL, 'reason', v_reason));
    RETURN jsonb_build_object('execution_id', p_execution_id, 'legal_hold', false, 'released', v_reason IS NOT NULL);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.put_payloads IS
'Store offloaded payloads (JSON as the writer''s codecs left it) for p_execution_id; returns their ids in order. '
'Called by workers (role harvest_worker) and clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.set_payloads_execution IS
'Give run-less offloaded payloads (a client''s start input, stored before the run existed) to the run that '
'references them, in the start''s transaction; rows another run owns, or another login stored, are left alone. '
'Roles harvest_operator, harvest_worker.';
COMMENT ON FUNCTION harvest.get_payloads IS
'The stored offloaded payloads of p_ids (an erased one is {"_harvest_erased": true}; an unknown id is absent). '
'For workers, clients and operators (roles harvest_reader, harvest_worker).';
COMMENT ON FUNCTION harvest.erase_payloads IS
'Erase a terminal execution''s payloads (input, output, failure details, events, tasks, dead letters, requests, '
'the offloaded rows it owns: never one through a reference alone), audited; HR030 under a legal hold, HR031 '
'while it runs, HR013 on a seal unless p_prior_residence. Returns the residences to walk. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.set_legal_hold IS
'Set a legal hold (with a reason) on an execution: erase_payloads refuses it and retention keeps it until '
'released; HR013 on a seal. '
'Audited. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.release_legal_hold IS
'Release an execution''s legal hold (returns whether one was set); HR002 for an unknown execution with no hold, '
'HR013 on a seal. Audited. For admins (role harvest_admin).';
