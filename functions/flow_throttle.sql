-- Start throttle, debounce and batch: gates that admit a start without creating
-- its execution yet (docs/flow-control.md). start_workflow calls _start_gate for
-- a top-level start (no parent) of a workflow whose declared policy
-- (harvest.flow_policies) holds one of them; the worker's scanner calls
-- release_pending_starts to start what is due.
--
--   A declared key path whose value is missing from the input means no key and no
--   gate: the start goes ahead at once (action 'start'), whatever the gate.
--   throttle {rps, burst, key}: a token bucket per (workflow, key). A start with
--     a token and nobody queued ahead of it starts at once; the rest queue FIFO
--     in harvest.pending_starts and are released at the rate. The deferred
--     response carries the workflow_id the run will have (minted now if none
--     was given) and no execution id.
--   debounce {key, quiet_secs, max_wait_secs}: a burst of starts per (workflow,
--     key) collapses into one row; each start keeps the latest input and pushes
--     the release quiet_secs later (never past the first start + max_wait_secs).
--     One run starts, with the latest input, after the quiet time. Every start of
--     the burst gets the same workflow_id back (the first start's, or minted).
--   batch {key, max_size, window_secs}: starts per (workflow, key) collect their
--     single argument into one row; one run starts with [[arg1, arg2, ...]] when
--     max_size starts have gathered (the start that fills the batch gets the run
--     back) or window_secs after the first start.
--
-- A conflict_policy other than unspecified is refused with these gates (HR001):
-- there is no running execution to resolve a conflict against at admission.
-- Children and continue-as-new successors are never deferred (their caller needs
-- the execution in the same transaction), nor is a released start itself
-- (_start_workflow p_flow_gates => false).
--
-- Serialisation: every admission and release of one (workflow, key) takes
-- pg_advisory_xact_lock(hashtext('harvest.start_gate:' || workflow || ':' || key)),
-- the release with pg_try_ (a busy key waits for the next scan).

-- Check the start gates of a declared workflow policy (declare_flow_policies).
CREATE OR REPLACE FUNCTION harvest._check_start_gates(p_workflow_name text, p_policy jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_gates text[] := ARRAY(SELECT g FROM unnest(ARRAY['throttle', 'debounce', 'batch']) AS g WHERE p_policy ? g);
    v_spec jsonb;
BEGIN
    IF cardinality(v_gates) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(v_gates) > 1 THEN
        RAISE EXCEPTION 'workflow %: % cannot be combined; declare one of throttle, debounce, batch',
            p_workflow_name, array_to_string(v_gates, ' and ') USING ERRCODE = 'HR001';
    END IF;
    v_spec := p_policy -> v_gates[1];
    IF jsonb_typeof(v_spec) <> 'object' THEN
        RAISE EXCEPTION 'workflow %: % must be a JSON object', p_workflow_name, v_gates[1]
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._resolve_key('[]', v_spec ->> 'key');
    -- Each number by the one rule (core.sql, _json_integer): HR001 naming it for a string, a
    -- fraction where a count goes, or a value out of range; then the gate's own bounds below.
    PERFORM harvest._json_number(v_spec -> f, v_gates[1] || '.' || f, 0, 'Infinity', 'workflow ' || p_workflow_name)
    FROM unnest(ARRAY['rps', 'burst', 'quiet_secs', 'max_wait_secs', 'window_secs']) AS f;
    PERFORM harvest._json_integer(v_spec -> 'max_size', v_gates[1] || '.max_size', 1, 2147483647,
                                  'workflow ' || p_workflow_name);
    IF v_gates[1] = 'throttle' AND NOT (coalesce((v_spec ->> 'rps')::double precision, 0) > 0
                                        AND coalesce((v_spec ->> 'burst')::double precision, 1) >= 1) THEN
        RAISE EXCEPTION 'workflow %: throttle needs rps > 0 and burst >= 1, got %', p_workflow_name, v_spec
            USING ERRCODE = 'HR001';
    ELSIF v_gates[1] = 'debounce' AND NOT (coalesce((v_spec ->> 'quiet_secs')::double precision, 0) > 0
                                           AND coalesce((v_spec ->> 'max_wait_secs')::double precision, 1) > 0) THEN
        RAISE EXCEPTION 'workflow %: debounce needs quiet_secs > 0 (and max_wait_secs > 0 if set), got %',
            p_workflow_name, v_spec USING ERRCODE = 'HR001';
    ELSIF v_gates[1] = 'batch' AND NOT (coalesce(harvest._json_integer(v_spec -> 'max_size', 'batch.max_size'), 0) >= 1
                                        AND coalesce((v_spec ->> 'window_secs')::double precision, 0) > 0) THEN
        RAISE EXCEPTION 'workflow %: batch needs max_size >= 1 and window_secs > 0, got %', p_workflow_name, v_spec
            USING ERRCODE = 'HR001';
    END IF;
END;
$$;

-- Take up to p_want whole tokens from a throttle bucket (the caller holds the
-- key's advisory lock); returns how many were taken.
CREATE OR REPLACE FUNCTION harvest._throttle_take(
    p_workflow_name text, p_key text, p_spec jsonb, p_want integer
)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_rps double precision := (p_spec ->> 'rps')::double precision;
    v_burst double precision := greatest(coalesce((p_spec ->> 'burst')::double precision, 1), 1);
    v_bucket harvest.start_throttle_buckets;
    v_tokens double precision;
    v_taken integer;
BEGIN
    INSERT INTO harvest.start_throttle_buckets (workflow_name, gate_key, tokens, refilled_at)
    VALUES (p_workflow_name, p_key, v_burst, v_now)
    ON CONFLICT (workflow_name, gate_key) DO NOTHING;
    SELECT * INTO v_bucket FROM harvest.start_throttle_buckets AS b
    WHERE b.workflow_name = p_workflow_name AND b.gate_key = p_key FOR UPDATE;
    IF v_bucket.override_expires_at > v_now THEN  -- a live pacing override (set_start_throttle_override)
        v_rps := v_bucket.override_rps;
        v_burst := v_bucket.override_burst;
    END IF;
    v_tokens := harvest._refilled_tokens(v_bucket.tokens, v_bucket.refilled_at, v_now, v_rps, v_burst);
    v_taken := least(greatest(p_want, 0), floor(v_tokens)::integer);
    UPDATE harvest.start_throttle_buckets AS b
    SET tokens = v_tokens - v_taken, refilled_at = greatest(v_now, b.refilled_at)
    WHERE b.workflow_name = p_workflow_name AND b.gate_key = p_key;
    RETURN v_taken;
END;
$$;

-- The key of a gated start's gate under its workflow's policy: '' for a gate declared without a
-- key, NULL where the declared key path's value is missing from the input (no gate) or the
-- policy has no gate.
CREATE OR REPLACE FUNCTION harvest._start_gate_key(p_policy jsonb, p_input jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN g.spec IS NULL THEN NULL
                WHEN g.spec ->> 'key' IS NULL THEN ''
                ELSE harvest._resolve_key(p_input, g.spec ->> 'key') END
    FROM (SELECT coalesce(p_policy -> 'throttle', p_policy -> 'debounce', p_policy -> 'batch') AS spec) AS g;
$$;

-- The gate lock of one (workflow, key) (docs/internals.md, "Lock order", 1).
CREATE OR REPLACE FUNCTION harvest._start_gate_lock(p_workflow_name text, p_key text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT hashtext('harvest.start_gate:' || p_workflow_name || ':' || p_key)::bigint;
$$;

-- The gates of the gated starts among p_starts (a JSON array of {workflow_name, input}), in
-- (workflow, key) order, before any start lock (docs/internals.md, "Lock order", 1): the one
-- transaction that waits on several, a batch of starts (start_workflows), takes them so, and
-- then admits its gated starts under them (_start_gate finds them held). A start whose key
-- value is missing passes no gate and locks none; an element that is not well formed none.
CREATE OR REPLACE FUNCTION harvest._lock_start_gates(p_starts jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_gate record;
BEGIN
    FOR v_gate IN
        SELECT DISTINCT p.name, harvest._start_gate_key(p.policy, coalesce(s.start -> 'input', '[]')) AS key
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_starts) = 'array' THEN p_starts ELSE '[]' END)
            AS s (start)
        JOIN harvest.flow_policies AS p
          ON p.kind = 'workflow' AND jsonb_typeof(s.start) = 'object'
             AND jsonb_typeof(s.start -> 'workflow_name') = 'string' AND p.name = s.start ->> 'workflow_name'
             AND p.policy ?| ARRAY['throttle', 'debounce', 'batch']
        WHERE jsonb_typeof(coalesce(s.start -> 'input', '[]')) = 'array'
        ORDER BY 1, 2
    LOOP
        CONTINUE WHEN v_gate.key IS NULL;
        PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(v_gate.name, v_gate.key));
    END LOOP;
END;
$$;

-- The run-less offloaded rows p_input references that the caller's login stored: what a
-- deferred start's release may hand its run (_start_gate, _release_pending_start). A reference
-- is JSON any starter writes; a row another login stored is not this start's to hand.
-- Each is locked FOR KEY SHARE, in id order, until the start commits: a discard of another
-- held-back start that owns the row too (_discard_pending_start, FOR UPDATE first) waits for this
-- start and then sees its pending row, so it keeps the row; one that locked first erases it,
-- and this start reads it gone. Unlocked, a discard erased a row this start had just recorded
-- (its NOT EXISTS did not see the uncommitted pending row).
CREATE OR REPLACE FUNCTION harvest._own_run_less_payloads(p_input jsonb)
RETURNS uuid[]
LANGUAGE sql
AS $$
    SELECT coalesce(array_agg(l.id ORDER BY l.id), '{}')
    FROM (
        SELECT p.id FROM harvest.payloads AS p
        WHERE p.id IN (SELECT harvest._payload_refs(p_input)) AND p.execution_id IS NULL
            AND p.login = session_user
        ORDER BY p.id
        FOR KEY SHARE OF p
    ) AS l;
$$;

-- The admission of a gated start. action: 'start' (go ahead now, with workflow_id), 'deferred'
-- (queued; no execution yet) or 'release' (this start filled a batch: its pending row,
-- release, is taken off the queue here and is the caller's to start, _release_pending_start,
-- after the locks its start takes: a batch of starts locks its starts' runs, in id order,
-- between its gates and its first start; docs/internals.md, "Lock order").
-- A batched start's argument is bounded one level tighter than a start's (HR001, _check_depth):
-- its batch's run receives [[argument, ...]], one array more than the start's own input, and an
-- argument that passed the start's check but not the run's would fail every release of its batch
-- (each retried, the others' arguments held with it) and every start that filled it.
CREATE OR REPLACE FUNCTION harvest._start_gate(
    p_workflow_name text, p_policy jsonb, p_input jsonb, p_workflow_id text, p_queue text,
    p_reuse_policy text, p_search_attributes jsonb, p_priority integer,
    p_execution_timeout_secs double precision, p_run_timeout_secs double precision,
    -- The caller's span (W3C traceparent, checked by start_workflow): the released run
    -- continues it (debounce, batch: the latest caller's that has one).
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (action text, workflow_id text, release harvest.pending_starts)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_kind text := CASE WHEN p_policy ? 'throttle' THEN 'throttle'
                        WHEN p_policy ? 'debounce' THEN 'debounce' ELSE 'batch' END;
    v_spec jsonb := p_policy -> v_kind;
    -- No key declared: one gate for every start (''). A declared key path whose value is
    -- missing: no key, so no gate (docs/flow-control.md, Key paths).
    v_key text := harvest._start_gate_key(p_policy, p_input);
    v_workflow_id text := coalesce(p_workflow_id, gen_random_uuid()::text);
    v_quiet interval := make_interval(secs => coalesce((v_spec ->> 'quiet_secs')::double precision, 0));
    v_max_wait interval := make_interval(secs => (v_spec ->> 'max_wait_secs')::double precision);
    v_row harvest.pending_starts;
    v_mine uuid[];
BEGIN
    PERFORM harvest._check_start_gates(p_workflow_name, p_policy);
    -- Checked before the key: a start whose key value is missing passes no gate, and its run
    -- got the arguments of a call the batched workflow cannot take.
    IF v_kind = 'batch' AND jsonb_array_length(p_input) <> 1 THEN
        RAISE EXCEPTION 'workflow % batches its starts: each start passes exactly one argument, got %',
            p_workflow_name, jsonb_array_length(p_input) USING ERRCODE = 'HR001',
            HINT = 'the batched run receives one argument: the list of those arguments';
    END IF;
    IF v_key IS NULL THEN
        RETURN QUERY SELECT 'start'::text, v_workflow_id, NULL::harvest.pending_starts;
        RETURN;
    END IF;
    IF v_kind = 'batch' THEN
        PERFORM harvest._check_depth(
            format('the argument of workflow %s, which batches its starts (its run receives the list of '
                   'the arguments, a level deeper)', p_workflow_name),
            jsonb_build_array(p_input));
    END IF;
    PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(p_workflow_name, v_key));
    -- The rows this start's release may hand its run: the run-less ones its input references
    -- that the caller's login stored (a client stores an offloaded input before its start). A
    -- batch's release hands each argument's own (its logins named any of its starters' rows,
    -- another held-back start's input among them: migration 0128).
    v_mine := harvest._own_run_less_payloads(p_input);
    IF v_kind = 'throttle' THEN
        IF NOT EXISTS (SELECT 1 FROM harvest.pending_starts AS p
                       WHERE p.kind = 'throttle' AND p.workflow_name = p_workflow_name AND p.gate_key = v_key)
           AND harvest._throttle_take(p_workflow_name, v_key, v_spec, 1) = 1 THEN
            RETURN QUERY SELECT 'start'::text, v_workflow_id, NULL::harvest.pending_starts;
            RETURN;
        END IF;
        INSERT INTO harvest.pending_starts (
            kind, workflow_name, gate_key, workflow_id, queue, input, search_attributes, priority,
            reuse_policy, execution_timeout_secs, run_timeout_secs, created_at, updated_at, traceparent, logins,
            payload_ids
        ) VALUES (
            'throttle', p_workflow_name, v_key, v_workflow_id, p_queue, p_input, p_search_attributes,
            p_priority, p_reuse_policy, p_execution_timeout_secs, p_run_timeout_secs, v_now, v_now,
            p_traceparent, ARRAY[session_user::text], v_mine
        ) RETURNING * INTO v_row;
    ELSIF v_kind = 'debounce' THEN
        INSERT INTO harvest.pending_starts AS p (
            kind, workflow_name, gate_key, workflow_id, queue, input, search_attributes, priority,
            reuse_policy, execution_timeout_secs, run_timeout_secs, created_at, updated_at, release_at,
            traceparent, logins, payload_ids
        ) VALUES (
            'debounce', p_workflow_name, v_key, v_workflow_id, p_queue, p_input, p_search_attributes,
            p_priority, p_reuse_policy, p_execution_timeout_secs, p_run_timeout_secs, v_now, v_now,
            least(v_now + v_quiet, v_now + v_max_wait), p_traceparent, ARRAY[session_user::text], v_mine
        )
        ON CONFLICT (kind, workflow_name, gate_key) WHERE kind IN ('debounce', 'batch') DO UPDATE
        SET input = excluded.input, queue = excluded.queue,
            search_attributes = excluded.search_attributes, priority = excluded.priority,
            reuse_policy = excluded.reuse_policy, execution_timeout_secs = excluded.execution_timeout_secs,
            run_timeout_secs = excluded.run_timeout_secs, starts = p.starts + 1, updated_at = v_now,
            release_at = least(v_now + v_quiet, p.created_at + v_max_wait),
            traceparent = coalesce(excluded.traceparent, p.traceparent),
            -- The input is the latest caller's alone now: so are the rows its release adopts.
            logins = excluded.logins, payload_ids = excluded.payload_ids
        RETURNING * INTO v_row;
    ELSE
        INSERT INTO harvest.pending_starts AS p (
            kind, workflow_name, gate_key, workflow_id, queue, input, search_attributes, priority,
            reuse_policy, execution_timeout_secs, run_timeout_secs, created_at, updated_at, release_at,
            traceparent, logins, payload_ids
        ) VALUES (
            'batch', p_workflow_name, v_key, v_workflow_id, p_queue, p_input, p_search_attributes,
            p_priority, p_reuse_policy, p_execution_timeout_secs, p_run_timeout_secs, v_now, v_now,
            v_now + make_interval(secs => (v_spec ->> 'window_secs')::double precision), p_traceparent,
            ARRAY[session_user::text], v_mine
        )
        ON CONFLICT (kind, workflow_name, gate_key) WHERE kind IN ('debounce', 'batch') DO UPDATE
        SET input = p.input || excluded.input, starts = p.starts + 1, updated_at = v_now,
            traceparent = coalesce(excluded.traceparent, p.traceparent),
            -- Every caller's login whose argument it collected (a row from before 0124: NULL).
            logins = CASE WHEN p.logins IS NULL OR session_user::text = ANY(p.logins) THEN p.logins
                          ELSE p.logins || session_user::text END,
            -- Each argument's own rows (a row from before 0128: NULL, released by its logins).
            payload_ids = CASE WHEN p.payload_ids IS NOT NULL THEN p.payload_ids || excluded.payload_ids END
        RETURNING * INTO v_row;
        IF v_row.starts >= harvest._json_integer(v_spec -> 'max_size', 'batch.max_size') THEN
            -- (Off the queue now: a later start of the batch in this transaction opens the next.)
            DELETE FROM harvest.pending_starts AS p WHERE p.id = v_row.id;
            RETURN QUERY SELECT 'release'::text, v_row.workflow_id, v_row;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT 'deferred'::text, v_row.workflow_id, NULL::harvest.pending_starts;
END;
$$;

-- The offloaded payload rows a held-back start owns, for its release to hand to its run and
-- its discard to erase (one rule for both): the run-less rows its input references that its
-- deferrals recorded (payload_ids, 0128); for a row from before 0128 (payload_ids NULL), those
-- that its logins stored (0126). A row from before 0126 (logins NULL too) cannot tell whose its
-- references are: its release (p_erasing false) hands every run-less row its input references,
-- as before (its run needs its input); its discard (p_erasing true) erases none (an erasure of
-- another starter's row is lost for good; an unowned run-less row is left to whoever owns it).
CREATE OR REPLACE FUNCTION harvest._pending_start_payloads(p_row harvest.pending_starts, p_erasing boolean)
RETURNS SETOF uuid
LANGUAGE sql STABLE
AS $$
    SELECT p.id FROM harvest.payloads AS p
    WHERE p.execution_id IS NULL AND p.id IN (SELECT harvest._payload_refs(p_row.input))
      AND CASE WHEN p_row.payload_ids IS NOT NULL THEN p.id = ANY(p_row.payload_ids)
               WHEN p_row.logins IS NOT NULL THEN p.login = ANY(p_row.logins)
               ELSE NOT p_erasing END;
$$;

-- Start one pending start now (the caller holds its key's lock) and drop its row (if
-- _start_gate has not: a filled batch).
-- The batched run's input is one argument: the list of the collected arguments.
-- The offloaded payloads it owns (_pending_start_payloads: run-less rows its input references
-- that its deferrals recorded; a client stored them when it made the start, docs/payloads.md)
-- are handed to the run in the same transaction, as set_payloads_execution would: a reference
-- is JSON the starter wrote, and one naming another starter's run-less row (another client's
-- held-back start's input, that client's argument to the same batch or not) must not make that
-- row this run's.
CREATE OR REPLACE FUNCTION harvest._release_pending_start(p_row harvest.pending_starts)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_started record;
BEGIN
    DELETE FROM harvest.pending_starts AS p WHERE p.id = p_row.id;
    SELECT s.execution_id, s.workflow_id, s.status, s.started_fresh INTO v_started
    FROM harvest._start_workflow(
        p_workflow_name => p_row.workflow_name,
        p_input => CASE WHEN p_row.kind = 'batch' THEN jsonb_build_array(p_row.input) ELSE p_row.input END,
        p_workflow_id => p_row.workflow_id, p_queue => p_row.queue,
        p_reuse_policy => p_row.reuse_policy, p_search_attributes => p_row.search_attributes,
        p_priority => p_row.priority, p_execution_timeout_secs => p_row.execution_timeout_secs,
        p_run_timeout_secs => p_row.run_timeout_secs, p_flow_gates => false,
        p_traceparent => p_row.traceparent) AS s;
    IF v_started.execution_id IS NOT NULL THEN
        UPDATE harvest.payloads AS p SET execution_id = v_started.execution_id
        WHERE p.execution_id IS NULL AND p.id IN (SELECT harvest._pending_start_payloads(p_row, false));
    END IF;
    RETURN QUERY SELECT v_started.execution_id, v_started.workflow_id, v_started.status, v_started.started_fresh;
END;
$$;

-- Release one row in a subtransaction: a start that fails (a quota, a duplicate
-- id) keeps its row with last_error and is tried again 10 s later.
CREATE OR REPLACE FUNCTION harvest._try_release_pending_start(p_row harvest.pending_starts)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_message text;
BEGIN
    BEGIN
        PERFORM harvest._release_pending_start(p_row);
        RETURN true;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
        UPDATE harvest.pending_starts AS p
        SET attempts = p.attempts + 1, last_error = v_message,
            release_at = harvest.now() + make_interval(secs => 10)
        WHERE p.id = p_row.id;
        RETURN false;
    END;
END;
$$;

-- The start a pending start makes when it is released (_release_pending_start), as
-- start_workflows' elements spell one, for a lock pass before it (start.sql, _start_admission;
-- release_pending_starts): a batch's run takes the list of the arguments.
CREATE OR REPLACE FUNCTION harvest._pending_start_args(p_row harvest.pending_starts)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'workflow_name', p_row.workflow_name, 'workflow_id', p_row.workflow_id,
        'input', CASE WHEN p_row.kind = 'batch' THEN jsonb_build_array(p_row.input) ELSE p_row.input END,
        'reuse_policy', p_row.reuse_policy);
$$;

-- The scanner's pass: start the due debounce and batch rows, and as many queued
-- throttled starts as each bucket's tokens allow (FIFO). Never waits on a gate
-- another transaction holds. Returns how many runs were started.
-- First the rows it releases, under their gates; then, before the first release, the start
-- locks of their starts, their flow keys, and every run they may supersede or replace, in id
-- order, with those runs' mutex keys (docs/internals.md, "Lock order", 2 to 5; as a batch of
-- starts does, start.sql start_workflows): released one by one, each locked its key's runs as
-- the scan reached it, and a release of two keys' starts met a group commit of those runs in
-- a cycle (40P01: a release that lost it kept its row, last_error, for 10 s;
-- tests/integration/test_row_lock_order.py).
CREATE OR REPLACE FUNCTION harvest.release_pending_starts(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_row harvest.pending_starts;
    v_due harvest.pending_starts[] := '{}';
    v_going jsonb;
    v_start record;
    v_bucket record;
    v_spec jsonb;
    v_tokens integer;
    v_released integer := 0;
BEGIN
    PERFORM harvest._check_limit('release_pending_starts', p_limit, 10000);
    FOR v_row IN
        SELECT * FROM harvest.pending_starts AS p
        WHERE p.release_at <= v_now AND p.kind IN ('debounce', 'batch')
        ORDER BY p.release_at, p.id LIMIT p_limit
    LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(harvest._start_gate_lock(v_row.workflow_name, v_row.gate_key));
        SELECT * INTO v_row FROM harvest.pending_starts AS p WHERE p.id = v_row.id AND p.release_at <= v_now;
        CONTINUE WHEN NOT FOUND;  -- a start moved it on meanwhile
        v_due := v_due || v_row;
    END LOOP;
    FOR v_bucket IN
        SELECT DISTINCT p.workflow_name, p.gate_key FROM harvest.pending_starts AS p
        WHERE p.kind = 'throttle' ORDER BY 1, 2 LIMIT p_limit
    LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(
            harvest._start_gate_lock(v_bucket.workflow_name, v_bucket.gate_key));
        SELECT f.policy -> 'throttle' INTO v_spec FROM harvest.flow_policies AS f
        WHERE f.kind = 'workflow' AND f.name = v_bucket.workflow_name;
        IF v_spec IS NULL THEN
            v_tokens := p_limit;  -- the throttle was withdrawn: release the queue
        ELSE
            v_tokens := harvest._throttle_take(v_bucket.workflow_name, v_bucket.gate_key, v_spec,
                (SELECT count(*)::integer FROM harvest.pending_starts AS p
                 WHERE p.kind = 'throttle' AND p.workflow_name = v_bucket.workflow_name
                   AND p.gate_key = v_bucket.gate_key AND coalesce(p.release_at, v_now) <= v_now));
        END IF;
        v_due := v_due || ARRAY(
            SELECT p FROM harvest.pending_starts AS p
            WHERE p.kind = 'throttle' AND p.workflow_name = v_bucket.workflow_name
              AND p.gate_key = v_bucket.gate_key AND coalesce(p.release_at, v_now) <= v_now
            ORDER BY p.id LIMIT v_tokens
        );
    END LOOP;
    IF cardinality(v_due) > 1 THEN
        SELECT jsonb_agg(harvest._pending_start_args(d)) INTO v_going FROM unnest(v_due) AS d;
        FOR v_start IN
            SELECT DISTINCT d.workflow_name, d.workflow_id FROM unnest(v_due) AS d ORDER BY 1, 2
        LOOP
            PERFORM harvest._lock_start_key(v_start.workflow_name, v_start.workflow_id);
        END LOOP;
        PERFORM harvest._lock_flow_keys_of((SELECT jsonb_agg(g.value || '{"quota": true}')
                                            FROM jsonb_array_elements(v_going) AS g));
        PERFORM harvest._lock_superseded_runs(v_going, p_runs => harvest._replaced_runs(v_going));
    END IF;
    FOREACH v_row IN ARRAY v_due LOOP
        IF harvest._try_release_pending_start(v_row) THEN
            v_released := v_released + 1;
        END IF;
    END LOOP;
    RETURN v_released;
END;
$$;

-- Deferred starts, for operators: one row per pending start (throttle) or collapsed burst
-- (debounce, batch), oldest first (created_at, id), at most p_limit (1..10000) after the position
-- (p_after_created_at, p_after_id: the last row of the previous page, both or neither; keyset
-- paging down pending_starts_listed, or pending_starts_workflow_listed for one workflow). id is
-- what discard_pending_start takes; input_bytes the size of its input's JSON, offloaded_bytes
-- that of the offloaded rows its input references (never the input itself). p_id, p_workflow_id:
-- only that start, only that workflow id's. Dynamic SQL: every call is planned for the filters
-- it has (a generic plan of "p_x IS NULL OR ..." reads the whole table); the offloaded rows by
-- their key (= ANY of an array: "IN (SELECT _payload_refs(...))" hash-joined every payload row).
CREATE OR REPLACE FUNCTION harvest.list_pending_starts(
    p_workflow_name text DEFAULT NULL,
    p_kind text DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_after_created_at timestamptz DEFAULT NULL,
    p_after_id bigint DEFAULT NULL,
    p_id bigint DEFAULT NULL,
    p_workflow_id text DEFAULT NULL
)
RETURNS TABLE (
    id bigint, kind text, workflow_name text, gate_key text, workflow_id text, starts integer,
    created_at timestamptz, release_at timestamptz, attempts integer, last_error text,
    input_bytes integer, offloaded_bytes bigint
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_kind text := lower(p_kind);
BEGIN
    PERFORM harvest._check_limit('list_pending_starts', p_limit, 10000);
    IF v_kind IS NOT NULL AND v_kind NOT IN ('throttle', 'debounce', 'batch') THEN
        RAISE EXCEPTION 'unknown pending start kind "%"', p_kind USING ERRCODE = 'HR001',
            HINT = 'use throttle, debounce or batch';
    END IF;
    IF (p_after_created_at IS NULL) <> (p_after_id IS NULL) THEN
        RAISE EXCEPTION 'a position needs both p_after_created_at and p_after_id' USING ERRCODE = 'HR001',
            HINT = 'pass the created_at and id of the last row of the previous page, or neither for the first';
    END IF;
    RETURN QUERY EXECUTE format($q$
        SELECT p.id, p.kind, p.workflow_name, p.gate_key, p.workflow_id, p.starts, p.created_at, p.release_at,
               p.attempts, p.last_error, octet_length(p.input::text),
               (SELECT coalesce(sum(o.bytes), 0)::bigint FROM harvest.payloads AS o
                WHERE o.id = ANY(ARRAY(SELECT harvest._payload_refs(p.input))))
        FROM harvest.pending_starts AS p
        WHERE (p.created_at, p.id) > ($4, $5) %s%s%s%s
        ORDER BY p.created_at, p.id
        LIMIT $3
    $q$,
        CASE WHEN p_workflow_name IS NOT NULL THEN ' AND p.workflow_name = $1' ELSE '' END,
        CASE WHEN v_kind IS NOT NULL THEN ' AND p.kind = $2' ELSE '' END,
        CASE WHEN p_id IS NOT NULL THEN ' AND p.id = $6' ELSE '' END,
        CASE WHEN p_workflow_id IS NOT NULL THEN ' AND p.workflow_id = $7' ELSE '' END)
    USING p_workflow_name, v_kind, p_limit, coalesce(p_after_created_at, '-infinity'::timestamptz),
          coalesce(p_after_id, 0), p_id, p_workflow_id;
END;
$$;

-- Discarding a held-back start (an operator's: a start sent by mistake, a customer's erasure
-- request for a start not yet run, a backlog after an incident). Each row is taken under its
-- gate's lock, as an admission and a release take it (the release with pg_try_, skipping a
-- held gate), and read again under it: a discard and a release of one row serialise there, and
-- the one that comes second finds the row gone (the release: nothing to start; the discard:
-- HR002 for one by id, skipped for one by filter). Several gates are taken in (workflow, key)
-- order, as a batch of starts takes them (docs/internals.md, "Lock order", 1).
-- The offloaded rows the start owns go with it (_pending_start_payloads, erasing: before 0126
-- none, as no owner can be told), unless another pending start's input references one too.
-- A reference is JSON a starter writes: a row another login stored is never reached through it.
-- harvest_admin's (not an operator's, whose cancel of a run keeps its history): it loses for good
-- what the starters sent (a batch's row, every starter's argument) and erases payload rows, as a
-- dead letter's discard and erase_payloads, both admin's.
CREATE OR REPLACE FUNCTION harvest._discard_pending_start(p_row harvest.pending_starts)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_erased integer;
BEGIN
    DELETE FROM harvest.pending_starts AS p WHERE p.id = p_row.id;
    -- The rows first, in id order (as an admission takes them, _own_run_less_payloads), then
    -- the references read in a statement of their own: its snapshot sees the held-back start of
    -- any admission this lock waited for.
    PERFORM 1 FROM (
        SELECT p.id FROM harvest.payloads AS p
        WHERE p.execution_id IS NULL AND p.id IN (SELECT harvest._pending_start_payloads(p_row, true))
        ORDER BY p.id
        FOR UPDATE OF p
    ) AS l;
    WITH gone AS (
        DELETE FROM harvest.payloads AS p
        WHERE p.execution_id IS NULL AND p.id IN (SELECT harvest._pending_start_payloads(p_row, true))
          AND NOT EXISTS (SELECT 1 FROM harvest.pending_starts AS o
                          WHERE p.id IN (SELECT harvest._payload_refs(o.input)))
        RETURNING 1
    )
    SELECT count(*)::integer INTO v_erased FROM gone;
    RETURN v_erased;
END;
$$;

-- What the audit row and the answer say of a discarded start: never its input.
CREATE OR REPLACE FUNCTION harvest._pending_start_summary(p_row harvest.pending_starts, p_erased integer)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'id', p_row.id, 'kind', p_row.kind, 'workflow_name', p_row.workflow_name, 'gate_key', p_row.gate_key,
        'workflow_id', p_row.workflow_id, 'starts', p_row.starts, 'created_at', p_row.created_at,
        'payloads_erased', p_erased);
$$;

-- Discard one held-back start by its id (list_pending_starts' id): its row and the offloaded
-- rows it owns, audited (pending_start.discard). HR002 when no start has that id: released
-- (find its run by its workflow_id) or discarded already.
CREATE OR REPLACE FUNCTION harvest.discard_pending_start(
    p_id bigint, p_operator_id text DEFAULT NULL, p_reason text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_row harvest.pending_starts;
    v_erased integer;
    v_answer jsonb;
BEGIN
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'pending start id is NULL' USING ERRCODE = 'HR001',
            HINT = 'pass the id list_pending_starts shows';
    END IF;
    PERFORM harvest._check_reason('a discard of a pending start', p_reason);
    SELECT * INTO v_row FROM harvest.pending_starts AS p WHERE p.id = p_id;
    IF FOUND THEN
        PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(v_row.workflow_name, v_row.gate_key));
        -- Read again under the gate: a release (or a discard) that held it took the row.
        SELECT * INTO v_row FROM harvest.pending_starts AS p WHERE p.id = p_id FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no pending start has id %', p_id USING ERRCODE = 'HR002',
            HINT = 'it was released (its run is found by its workflow_id) or discarded already; '
                   'list_pending_starts shows what still waits';
    END IF;
    v_erased := harvest._discard_pending_start(v_row);
    v_answer := harvest._pending_start_summary(v_row, v_erased);
    PERFORM harvest._audit('pending_start.discard', v_row.workflow_name, p_operator_id,
                           jsonb_strip_nulls(v_answer || jsonb_build_object('reason', p_reason)));
    RETURN v_answer;
END;
$$;

-- Discard the held-back starts a filter selects, oldest first, at most p_limit (1..1000) a call:
-- at least one of workflow name, gate key, kind, created after or before (nothing, or a kind
-- alone, would select every start of every workflow: HR001). p_dry_run writes nothing: matched
-- counts what the filter selects, ids are the first p_limit. One audit row per call
-- (pending_start.discard_many) names the ids discarded. A row released meanwhile is skipped.
CREATE OR REPLACE FUNCTION harvest.discard_pending_starts(
    p_workflow_name text DEFAULT NULL, p_gate_key text DEFAULT NULL, p_kind text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_limit integer DEFAULT 100, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_reason text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_kind text := lower(p_kind);
    v_ids bigint[];
    v_matched bigint;
    v_gate record;
    v_row harvest.pending_starts;
    v_done bigint[] := '{}';
    v_erased integer := 0;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001',
            HINT = 'discard at most 1000 pending starts a call; call again for the rest';
    END IF;
    IF v_kind IS NOT NULL AND v_kind NOT IN ('throttle', 'debounce', 'batch') THEN
        RAISE EXCEPTION 'unknown pending start kind "%"', p_kind USING ERRCODE = 'HR001',
            HINT = 'use throttle, debounce or batch';
    END IF;
    IF p_workflow_name = '' THEN
        RAISE EXCEPTION 'workflow_name is empty' USING ERRCODE = 'HR001',
            HINT = 'name the workflow whose held-back starts to discard, or pass none';
    END IF;
    IF p_workflow_name IS NULL AND p_gate_key IS NULL AND p_created_after IS NULL AND p_created_before IS NULL THEN
        RAISE EXCEPTION 'a discard of pending starts needs a filter: none of workflow name, gate key, created '
                        'after or created before was given' USING ERRCODE = 'HR001',
            HINT = 'name the starts (e.g. a workflow name, or created before a time); a kind alone would '
                   'select every held-back start';
    END IF;
    IF NOT coalesce(p_dry_run, false) THEN
        PERFORM harvest._check_reason('a discard of pending starts', p_reason);
    END IF;
    -- The first p_limit ids only (a backlog's every id is never gathered), and how many matched
    -- (the window counts them before the LIMIT).
    SELECT coalesce(max(m.matched), 0), coalesce(array_agg(m.id ORDER BY m.created_at, m.id), '{}')
    INTO v_matched, v_ids
    FROM (
        SELECT s.id, s.created_at, count(*) OVER () AS matched
        FROM harvest.pending_starts AS s
        WHERE (p_workflow_name IS NULL OR s.workflow_name = p_workflow_name)
          AND (p_gate_key IS NULL OR s.gate_key = p_gate_key)
          AND (v_kind IS NULL OR s.kind = v_kind)
          AND (p_created_after IS NULL OR s.created_at >= p_created_after)
          AND (p_created_before IS NULL OR s.created_at < p_created_before)
        ORDER BY s.created_at, s.id
        LIMIT p_limit
    ) AS m;
    IF coalesce(p_dry_run, false) THEN
        RETURN jsonb_build_object('dry_run', true, 'shard_id', harvest.get_shard_id(), 'matched', v_matched,
                                  'discarded', 0, 'ids', to_jsonb(v_ids), 'payloads_erased', 0);
    END IF;
    -- The gates first, in (workflow, key) order; then each row read again under its gate.
    FOR v_gate IN
        SELECT DISTINCT s.workflow_name, s.gate_key FROM harvest.pending_starts AS s
        WHERE s.id = ANY(v_ids) ORDER BY 1, 2
    LOOP
        PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(v_gate.workflow_name, v_gate.gate_key));
    END LOOP;
    PERFORM 1 FROM harvest.pending_starts AS s WHERE s.id = ANY(v_ids)
    ORDER BY s.created_at, s.id FOR UPDATE OF s;
    -- The offloaded rows of them all, in one id order, before the first is discarded (as a
    -- discard by id and an admission take theirs: docs/internals.md, "Lock order", 1). Locked
    -- start by start, this call held the higher row of one start while it waited for the lower
    -- row of the next, and a discard of a start owning both (the lower first) waited for it: 40P01.
    PERFORM 1 FROM (
        SELECT p.id FROM harvest.payloads AS p
        WHERE p.execution_id IS NULL
          AND p.id IN (SELECT harvest._pending_start_payloads(s, true) FROM harvest.pending_starts AS s
                       WHERE s.id = ANY(v_ids))
        ORDER BY p.id
        FOR UPDATE OF p
    ) AS l;
    -- (the rows locked above, read again as they now are; an array of the row type would do
    -- the same, but the SQL files' parse check cannot resolve a table's row type in an array)
    FOR v_row IN SELECT * FROM harvest.pending_starts AS s WHERE s.id = ANY(v_ids) ORDER BY s.created_at, s.id LOOP
        v_erased := v_erased + harvest._discard_pending_start(v_row);
        v_done := v_done || v_row.id;
    END LOOP;
    IF cardinality(v_done) > 0 THEN
        PERFORM harvest._audit('pending_start.discard_many', p_workflow_name, p_operator_id, jsonb_strip_nulls(
            jsonb_build_object('workflow_name', p_workflow_name, 'gate_key', p_gate_key, 'kind', v_kind,
                               'created_after', p_created_after, 'created_before', p_created_before,
                               'limit', p_limit, 'reason', p_reason, 'ids', to_jsonb(v_done),
                               'payloads_erased', v_erased)));
    END IF;
    RETURN jsonb_build_object('dry_run', false, 'shard_id', harvest.get_shard_id(), 'matched', v_matched,
                              'discarded', cardinality(v_done), 'ids', to_jsonb(v_done),
                              'skipped', cardinality(v_ids) - cardinality(v_done), 'payloads_erased', v_erased);
END;
$$;

-- Pacing overrides (the spec's POST/DELETE /admin/start-throttle/{workflow_name}/override):
-- a TTL'd rate laid over a throttle declared without a key, kept on its one bucket
-- (gate_key ''), reverting by itself once override_expires_at passes (each admission and
-- release compares it with now). A throttle with a key has a bucket per key and none
-- to override (HR007), as for activity rate limits (flow_rate_limits.sql).

-- The declared throttle of a workflow that an override may target, its bucket made
-- if none is yet; HR002 (no throttle declared) or HR007 (a per-key throttle).
CREATE OR REPLACE FUNCTION harvest._throttle_override_spec(p_workflow_name text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_spec jsonb;
BEGIN
    SELECT p.policy -> 'throttle' INTO v_spec FROM harvest.flow_policies AS p
    WHERE p.kind = 'workflow' AND p.name = p_workflow_name;
    IF v_spec IS NULL THEN
        RAISE EXCEPTION 'workflow % declares no start throttle', p_workflow_name USING ERRCODE = 'HR002',
            HINT = 'declare @workflow(throttle=Throttle(rps=...)) and start a worker for it';
    END IF;
    IF v_spec ->> 'key' IS NOT NULL THEN
        RAISE EXCEPTION 'workflow % declares a per-key start throttle (key %): there is no single bucket '
            'to override', p_workflow_name, v_spec ->> 'key' USING ERRCODE = 'HR007',
            HINT = 'pacing overrides apply to throttles declared without a key';
    END IF;
    INSERT INTO harvest.start_throttle_buckets (workflow_name, gate_key, tokens, refilled_at)
    VALUES (p_workflow_name, '', greatest(coalesce((v_spec ->> 'burst')::double precision, 1), 1), harvest.now())
    ON CONFLICT (workflow_name, gate_key) DO NOTHING;
    RETURN v_spec;
END;
$$;

-- A workflow's declared start throttle and its live override (an expired one reads NULL).
CREATE OR REPLACE FUNCTION harvest.get_start_throttle(p_workflow_name text)
RETURNS TABLE (
    workflow_name text, rps double precision, burst double precision,
    override_rps double precision, override_burst double precision, override_expires_at timestamptz
)
LANGUAGE sql STABLE
AS $$
    SELECT p.name, (p.policy #>> '{throttle,rps}')::double precision,
           greatest(coalesce((p.policy #>> '{throttle,burst}')::double precision, 1), 1),
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_rps END,
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_burst END,
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_expires_at END
    FROM harvest.flow_policies AS p
    LEFT JOIN harvest.start_throttle_buckets AS b ON b.workflow_name = p.name AND b.gate_key = ''
    WHERE p.kind = 'workflow' AND p.name = p_workflow_name AND p.policy ? 'throttle';
$$;

-- A workflow's declared debounce or batch, as its workers declared it on this shard
-- (declare_flow_policies): its kind and its key path (NULL: one gate for all its starts); no
-- row without one. A client that starts the workflow by name on shards reads it once, to place
-- a burst by the gate's key on one shard (docs/sharding.md, "Placing a start").
CREATE OR REPLACE FUNCTION harvest.get_start_gate(p_workflow_name text)
RETURNS TABLE (workflow_name text, kind text, key_path text)
LANGUAGE sql STABLE
AS $$
    SELECT p.name, g.kind, p.policy -> g.kind ->> 'key'
    FROM harvest.flow_policies AS p
    CROSS JOIN LATERAL (SELECT CASE WHEN p.policy ? 'debounce' THEN 'debounce' ELSE 'batch' END AS kind) AS g
    WHERE p.kind = 'workflow' AND p.name = p_workflow_name AND p.policy ?| ARRAY['debounce', 'batch'];
$$;

-- Lay a temporary pacing override on a workflow's start throttle; it reverts by itself
-- after p_ttl_secs. Starts queued behind the throttle are released at the new rate.
CREATE OR REPLACE FUNCTION harvest.set_start_throttle_override(
    p_workflow_name text, p_rps double precision, p_burst double precision DEFAULT NULL,
    p_ttl_secs double precision DEFAULT 3600, p_operator_id text DEFAULT NULL
)
RETURNS TABLE (
    workflow_name text, rps double precision, burst double precision,
    override_rps double precision, override_burst double precision, override_expires_at timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_burst double precision := harvest._override_burst(p_rps, p_burst, p_ttl_secs);  -- (checks first)
BEGIN
    PERFORM harvest._throttle_override_spec(p_workflow_name);
    PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(p_workflow_name, ''));
    UPDATE harvest.start_throttle_buckets AS b
    SET override_rps = p_rps, override_burst = v_burst,
        override_expires_at = harvest.now() + make_interval(secs => p_ttl_secs)
    WHERE b.workflow_name = p_workflow_name AND b.gate_key = '';
    -- numeric in JSON: see set_rate_limit_override
    PERFORM harvest._audit('start_throttle.override', p_workflow_name, p_operator_id, jsonb_build_object(
        'rps', p_rps::numeric, 'burst', v_burst::numeric,
        'ttl_secs', p_ttl_secs::numeric));
    RETURN QUERY SELECT * FROM harvest.get_start_throttle(p_workflow_name);
END;
$$;

-- Drop a start-throttle override now; answers whether one was live.
CREATE OR REPLACE FUNCTION harvest.clear_start_throttle_override(
    p_workflow_name text, p_operator_id text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_live boolean;
BEGIN
    PERFORM harvest._throttle_override_spec(p_workflow_name);
    PERFORM pg_advisory_xact_lock(harvest._start_gate_lock(p_workflow_name, ''));
    SELECT b.override_expires_at > harvest.now() INTO v_live FROM harvest.start_throttle_buckets AS b
    WHERE b.workflow_name = p_workflow_name AND b.gate_key = '';
    UPDATE harvest.start_throttle_buckets AS b
    SET override_rps = NULL, override_burst = NULL, override_expires_at = NULL
    WHERE b.workflow_name = p_workflow_name AND b.gate_key = '';
    PERFORM harvest._audit('start_throttle.clear_override', p_workflow_name, p_operator_id,
                           jsonb_build_object('was_live', coalesce(v_live, false)));
    RETURN coalesce(v_live, false);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.release_pending_starts IS
'Start the due debounce and batch starts and as many throttled starts as each bucket''s tokens allow (FIFO), '
'never waiting on a held key; returns how many runs started. Called by the scanner, harvest.scan (role '
'harvest_worker).';
COMMENT ON FUNCTION harvest.list_pending_starts IS
'Deferred starts, one row per pending throttled start or collapsed debounce or batch burst, with the id '
'discard_pending_start takes and the input''s size (input_bytes inline, offloaded_bytes referenced), oldest first, '
'at most p_limit (1..10000) after p_after_created_at and p_after_id (keyset paging). For operators (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.discard_pending_start IS
'Discard one start held back by a throttle, debounce or batch, by id, under its gate''s lock (a release racing it '
'wins or loses whole), with the run-less offloaded rows it owns; audited; HR002 when released or discarded already. '
'Irreversible, as a dead letter''s discard and an erasure: role harvest_admin.';
COMMENT ON FUNCTION harvest.discard_pending_starts IS
'Discard the held-back starts a filter selects (workflow name, gate key, kind, created after/before; one needed), '
'oldest first, at most p_limit a call, with the offloaded rows each owns; p_dry_run counts; audited. Role '
'harvest_admin.';
COMMENT ON FUNCTION harvest.get_start_gate IS
'A workflow''s declared debounce or batch (kind, key path) on this shard, no row without one; a sharded client reads it once per workflow name to place a burst started by name on one shard. harvest_reader.';
COMMENT ON FUNCTION harvest.get_start_throttle IS
'A workflow''s declared start throttle (rps, burst) and its live pacing override (an expired one reads NULL). '
'For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.set_start_throttle_override IS
'Lay a temporary rate (rps, burst) over a workflow''s start throttle, reverting by itself after p_ttl_secs; '
'audited; HR002 without a throttle, HR007 for a per-key one. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.clear_start_throttle_override IS
'Drop a workflow''s start-throttle override now, audited; returns whether one was live. For admins (role '
'harvest_admin).';
