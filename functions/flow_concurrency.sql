-- Per-key concurrency: activity caps (max_concurrent / concurrency_key), per-key
-- workflow concurrency (defer and latest-wins cancel_running), the declared
-- policies, and the status view. claim_tasks (claim.sql) calls _admit_candidates
-- for the candidates of its bounded window that carry a gate; uncapped tasks
-- never reach this file.
--
-- Admission is serialised per key with a transaction advisory lock in the
-- one-argument space, pg_advisory_xact_lock(hashtext(key)) - the namespace the
-- spec gives the claim gate and the supersede pass. Two claimers counting the
-- same key at once would each see N-1 in flight and both admit; holding the key
-- lock while counting and claiming, in a statement that starts after the lock
-- was granted (a fresh READ COMMITTED snapshot sees every committed claim),
-- makes admission one-at-a-time per key. The claim takes the lock with
-- pg_try_advisory_xact_lock: a key locked by another claimer (or by a start's
-- supersede pass) is skipped this round, so claim_tasks still never waits and
-- cannot join a deadlock. Keys are tried in sorted order.
--
-- In flight, for an activity key: running activity task rows with the key
-- (the partial index tasks_concurrency_running). A slot is taken by the claim's
-- UPDATE and given back by whatever ends the running row in its own transaction:
-- complete_activity and fail_activity delete it or move it back to pending, and
-- the timeout scanner does the same for an expired lease, so a killed worker's
-- slots return when its leases expire and are scanned. A running row with an
-- expired lease still counts until then: its worker may still be calling the
-- downstream API, so counting it is the side that never over-admits.
--
-- In flight, for a workflow key ("defer"): admitted runs, i.e. rows of
-- harvest.workflow_slots whose execution is RUNNING. The slot is taken when the
-- run's first workflow task is claimed and removed when the run leaves RUNNING
-- (trigger executions_flow_release); a row whose run already ended never counts.

-- Resolve a key path against a JSON array of positional arguments:
-- "input" is the first argument, "input.a.b" its field a.b. A string value is
-- the key itself, any other JSON value its text; a missing value is NULL (no gate).
CREATE OR REPLACE FUNCTION harvest._resolve_key(p_input jsonb, p_path text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_parts text[];
    v_value jsonb;
BEGIN
    IF p_path IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_path !~ E'^input(\\.[A-Za-z0-9_\\-]+)*$' THEN
        RAISE EXCEPTION 'key path "%" is not input or input.<field>[.<field>...]', p_path
            USING ERRCODE = 'HR001',
            HINT = 'input is the first positional argument; input.tenant_id its field tenant_id';
    END IF;
    v_parts := (string_to_array(p_path, '.'))[2:];
    IF jsonb_typeof(p_input) <> 'array' THEN
        RETURN NULL;
    END IF;
    v_value := p_input -> 0;
    IF cardinality(v_parts) > 0 THEN
        v_value := v_value #> v_parts;
    END IF;
    IF v_value IS NULL OR jsonb_typeof(v_value) = 'null' THEN
        RETURN NULL;
    END IF;
    RETURN CASE WHEN jsonb_typeof(v_value) = 'string' THEN v_value #>> '{}' ELSE v_value::text END;
END;
$$;

-- The flow keys a workflow's policy names for a start's input: its quota key and its
-- concurrency key, each NULL without that policy or without a value at its path. The one
-- place they are resolved: a new run's start (start.sql, _start_flow_keys, which checks the
-- quota), a continue-as-new successor's (_start_workflow) and the passes that take the keys
-- before the starts (decide.sql, _lock_flow_keys_of).
CREATE OR REPLACE FUNCTION harvest._resolve_flow_keys(
    p_input jsonb, p_policy jsonb, OUT quota_key text, OUT concurrency_key text
)
LANGUAGE sql IMMUTABLE
AS $$
    SELECT harvest._resolve_key(p_input, p_policy #>> '{quota,key}'),
           harvest._resolve_key(p_input, p_policy #>> '{concurrency,key}');
$$;

-- The gate columns of an activity task from its options (the BEFORE INSERT
-- trigger tasks_derived_columns calls this). rate_key names the token bucket:
-- rate:<activity> for a static limit, dyn-rate:<key path>:<value> per key.
CREATE OR REPLACE FUNCTION harvest._flow_task_columns(p_task harvest.tasks)
RETURNS harvest.tasks
LANGUAGE plpgsql
AS $$
DECLARE
    v_rate jsonb := p_task.options -> 'rate_limit';
    v_path text;
BEGIN
    IF p_task.options ->> 'concurrency_key' IS NOT NULL
       AND p_task.options ->> 'max_concurrent' IS NOT NULL THEN
        p_task.concurrency_key := p_task.options ->> 'concurrency_key';
        p_task.concurrency_limit := harvest._json_integer(p_task.options -> 'max_concurrent', 'options.max_concurrent', 1);
    END IF;
    IF jsonb_typeof(v_rate) = 'object' THEN
        v_path := v_rate ->> 'key';
        -- A key path whose value is missing: no key, so no bucket (NULL rate_key, no gate).
        p_task.rate_key := CASE WHEN v_path IS NULL THEN 'rate:' || p_task.activity_name
            ELSE 'dyn-rate:' || v_path || ':' || harvest._resolve_key(p_task.input, v_path) END;
    END IF;
    RETURN p_task;
END;
$$;

-- Declare the policies of an App (the worker calls this at start-up):
-- p_policies = {"workflows": {name: policy}, "activities": {name: policy}}.
-- A workflow policy may hold concurrency {key, limit, on_conflict} and quota
-- {key, max_active_executions, max_history_bytes, max_dead_letters}; an activity
-- policy max_concurrent, concurrency_key and rate_limit {rps, burst, key}.
-- Names not listed keep their last declaration. Returns how many were written.
CREATE OR REPLACE FUNCTION harvest.declare_flow_policies(p_policies jsonb)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_entry record;
    v_kind text;
    v_count integer := 0;
    v_concurrency jsonb;
BEGIN
    IF p_policies IS NULL OR jsonb_typeof(p_policies) <> 'object' THEN
        RAISE EXCEPTION 'policies must be a JSON object {"workflows": {...}, "activities": {...}}'
            USING ERRCODE = 'HR001';
    END IF;
    FOREACH v_kind IN ARRAY ARRAY['workflow', 'activity'] LOOP
        FOR v_entry IN
            SELECT key AS name, value AS policy
            FROM jsonb_each(coalesce(p_policies -> (CASE v_kind WHEN 'workflow' THEN 'workflows'
                                                         ELSE 'activities' END), '{}'::jsonb))
        LOOP
            IF jsonb_typeof(v_entry.policy) <> 'object' THEN
                RAISE EXCEPTION '% % policy must be a JSON object', v_kind, v_entry.name
                    USING ERRCODE = 'HR001';
            END IF;
            v_concurrency := v_entry.policy -> 'concurrency';
            IF v_concurrency IS NOT NULL THEN
                PERFORM harvest._resolve_key('[]', v_concurrency ->> 'key');
                IF harvest._json_integer(v_concurrency -> 'limit', 'concurrency.limit', 1,
                                         p_where => v_kind || ' ' || v_entry.name) IS NULL THEN
                    RAISE EXCEPTION '% %: concurrency needs a limit, a whole number of at least 1', v_kind, v_entry.name
                        USING ERRCODE = 'HR001';
                END IF;
                IF coalesce(v_concurrency ->> 'on_conflict', 'defer') NOT IN ('defer', 'cancel_running') THEN
                    RAISE EXCEPTION 'workflow %: unknown on_conflict "%"', v_entry.name,
                        v_concurrency ->> 'on_conflict'
                        USING ERRCODE = 'HR001', HINT = 'use defer or cancel_running';
                END IF;
            END IF;
            PERFORM harvest._resolve_key('[]', v_entry.policy #>> '{quota,key}');
            -- The numbers a start or a claim reads later, by the one rule (core.sql, _json_integer):
            -- a quota read at every start, an activity's cap and rate at every claim.
            PERFORM harvest._json_bigint(v_entry.policy #> ARRAY['quota', q], 'quota.' || q, 0,
                                         p_where => v_kind || ' ' || v_entry.name)
            FROM unnest(ARRAY['max_active_executions', 'max_history_bytes', 'max_dead_letters']) AS q;
            PERFORM harvest._json_integer(v_entry.policy -> 'max_concurrent', 'max_concurrent', 1,
                                          p_where => v_kind || ' ' || v_entry.name),
                    harvest._json_number(v_entry.policy #> '{rate_limit,rps}', 'rate_limit.rps', 0, 'Infinity',
                                         v_kind || ' ' || v_entry.name),
                    harvest._json_number(v_entry.policy #> '{rate_limit,burst}', 'rate_limit.burst', 1, 'Infinity',
                                         v_kind || ' ' || v_entry.name);
            PERFORM harvest._check_start_gates(v_entry.name, v_entry.policy);  -- flow_throttle.sql
            PERFORM harvest._resolve_key('[]', v_entry.policy #>> '{rate_limit,key}');
            INSERT INTO harvest.flow_policies (kind, name, policy, updated_at)
            VALUES (v_kind, v_entry.name, v_entry.policy, harvest.now())
            ON CONFLICT (kind, name) DO UPDATE
            SET policy = excluded.policy, updated_at = excluded.updated_at
            WHERE flow_policies.policy IS DISTINCT FROM excluded.policy;
            v_count := v_count + 1;
        END LOOP;
    END LOOP;
    RETURN v_count;
END;
$$;

-- The gates of one claim: given the candidate ids of the bounded window (some
-- with a concurrency or rate key) and the gated candidates' columns as the claim's
-- windows read them (p_gates; those of ids not in p_ids are left out), return the
-- ids that may be claimed now. Candidates refused by a full cap or an empty bucket
-- are deferred a little (due_at moves), so a saturated key does not fill the window
-- and starve the rest of the queue; candidates whose key another claimer holds are
-- only skipped. A candidate with no gate is admitted (the lease skips it if it is
-- no longer pending).
CREATE OR REPLACE FUNCTION harvest._admit_candidates(
    p_ids bigint[], p_gates harvest.gated_candidate[], p_now timestamptz
)
RETURNS bigint[]
LANGUAGE plpgsql
AS $$
DECLARE
    -- How long a task refused by a full cap waits before the next look.
    c_cap_recheck constant interval := interval '200 milliseconds';
    v_key text;
    v_locked text[] := ARRAY[]::text[];
    v_buckets text[] := ARRAY[]::text[];
    v_admit bigint[];
    v_deferred bigint[];
    v_waits double precision[];
    -- A rate-limited refused candidate's bucket, rank in it and the bucket's rate (NULL otherwise).
    v_wait_keys text[];
    v_wait_ranks bigint[];
    v_wait_rps double precision[];
    -- The gated candidates' columns, in one array each.
    v_id bigint[];
    v_kind text[];
    v_execution uuid[];
    v_ckey text[];
    v_climit integer[];
    v_rkey text[];
    v_priority integer[];
    v_due timestamptz[];
    v_activity text[];
    v_options jsonb[];
    v_rated boolean;
BEGIN
    -- The candidates' columns come from the windows that found them: the key locks,
    -- the buckets and the ranks read no candidate by id. Reading the window's 216 again
    -- by primary key cost an index descent and a heap page each, 724 buffers a claim at
    -- 10M pending, many from outside the pool (docs/performance.md, "claimcols row").
    -- They were read before the key locks are taken (as the read here was): a candidate
    -- another claim took in between is ranked here but counted in flight as well (that
    -- count still starts after the locks), so the race can only admit one fewer, never
    -- one more; the lease skips it anyway.
    SELECT array_agg(g.id), array_agg(g.kind), array_agg(g.execution_id), array_agg(g.concurrency_key),
           array_agg(g.concurrency_limit), array_agg(g.rate_key), array_agg(g.priority), array_agg(g.due_at),
           array_agg(g.activity_name), array_agg(g.options), bool_or(g.rate_key IS NOT NULL)
    INTO v_id, v_kind, v_execution, v_ckey, v_climit, v_rkey, v_priority, v_due, v_activity, v_options, v_rated
    FROM unnest(p_gates) AS g
    WHERE g.id IN (SELECT u.id FROM unnest(p_ids) AS u (id));  -- (hashed)
    IF v_id IS NULL THEN
        RETURN p_ids;  -- no candidate carries a gate
    END IF;

    -- A key is counted only at READ COMMITTED, where the count's statement (after the lock) sees
    -- every claim of the key committed before it. A claim in a snapshot transaction (a session's
    -- default_transaction_isolation, or the caller's own REPEATABLE READ or SERIALIZABLE block)
    -- would count with a snapshot older than the lock, miss a claim committed in between and
    -- admit over the limit: it locks no key, so its keyed candidates are busy this round, as if
    -- another claimer held their keys (the worker's own claims run at READ COMMITTED).
    FOR v_key IN
        SELECT DISTINCT k.key FROM unnest(v_ckey) AS k (key)
        WHERE k.key IS NOT NULL AND current_setting('transaction_isolation') = 'read committed' ORDER BY 1
    LOOP
        IF pg_try_advisory_xact_lock(hashtext(v_key)) THEN
            v_locked := v_locked || v_key;
        END IF;
    END LOOP;
    IF v_rated THEN  -- no rate-keyed candidate: no bucket to make, lock or follow
        v_buckets := harvest._lock_rate_buckets(v_rkey, v_activity, v_options, v_id, p_now);
    END IF;

    -- Every step is MATERIALIZED: judged is read by three aggregates below, and
    -- an inlined CASE would run its per-row subqueries once for each.
    WITH c AS MATERIALIZED (
        SELECT u.id, u.kind, u.execution_id, u.concurrency_key, u.concurrency_limit, u.rate_key,
               row_number() OVER (PARTITION BY u.kind, u.concurrency_key
                                  ORDER BY u.priority DESC, u.due_at, u.id) AS c_rank,
               row_number() OVER (PARTITION BY u.rate_key
                                  ORDER BY u.priority DESC, u.due_at, u.id) AS r_rank
        FROM unnest(v_id, v_kind, v_execution, v_ckey, v_climit, v_rkey, v_priority, v_due)
            AS u (id, kind, execution_id, concurrency_key, concurrency_limit, rate_key, priority, due_at)
    ),
    -- In flight once per key this claim holds, not once per candidate: a window
    -- holds hundreds of candidates of a few keys.
    flight AS MATERIALIZED (
        SELECT k.kind, k.concurrency_key, harvest._in_flight(k.kind, k.concurrency_key) AS n
        FROM (SELECT DISTINCT c.kind, c.concurrency_key FROM c WHERE c.concurrency_key = ANY(v_locked)) AS k
    ),
    judged AS MATERIALIZED (
        SELECT c.id,
               CASE
                   WHEN c.concurrency_key IS NULL THEN 'ok'
                   WHEN NOT c.concurrency_key = ANY(v_locked) THEN 'busy'
                   WHEN c.kind = 'workflow' AND EXISTS (
                       SELECT 1 FROM harvest.workflow_slots AS s WHERE s.execution_id = c.execution_id
                   ) THEN 'ok'
                   WHEN c.c_rank <= c.concurrency_limit - f.n THEN 'ok'
                   ELSE 'capped'
               END AS cap,
               CASE
                   WHEN c.rate_key IS NULL THEN 'ok'
                   WHEN NOT c.rate_key = ANY(v_buckets) THEN 'busy'
                   WHEN c.r_rank <= floor(b.tokens) THEN 'ok'
                   ELSE 'limited'
               END AS rate,
               CASE WHEN b.rps > 0 THEN (c.r_rank - b.tokens) / b.rps END AS rate_wait,
               c.rate_key, c.r_rank, b.rps
        FROM c
        LEFT JOIN flight AS f ON f.kind = c.kind AND f.concurrency_key = c.concurrency_key
        LEFT JOIN LATERAL harvest._bucket_now(c.rate_key, p_now) AS b ON c.rate_key = ANY(v_buckets)
    )
    -- Admitted: the candidates with no gate, and the gated ones both gates let through.
    SELECT coalesce(array_agg(u.id) FILTER (WHERE j.id IS NULL OR (j.cap = 'ok' AND j.rate = 'ok')),
                    ARRAY[]::bigint[]),
           array_agg(j.id) FILTER (WHERE j.cap = 'capped' OR j.rate = 'limited'),
           array_agg(CASE WHEN j.rate = 'limited' THEN j.rate_wait
                          ELSE extract(EPOCH FROM c_cap_recheck)::double precision END)
               FILTER (WHERE j.cap = 'capped' OR j.rate = 'limited'),
           array_agg(CASE WHEN j.rate = 'limited' AND j.rps > 0 THEN j.rate_key END)
               FILTER (WHERE j.cap = 'capped' OR j.rate = 'limited'),
           array_agg(j.r_rank) FILTER (WHERE j.cap = 'capped' OR j.rate = 'limited'),
           array_agg(j.rps) FILTER (WHERE j.cap = 'capped' OR j.rate = 'limited')
    INTO v_admit, v_deferred, v_waits, v_wait_keys, v_wait_ranks, v_wait_rps
    FROM unnest(p_ids) AS u (id)
    LEFT JOIN judged AS j ON j.id = u.id;

    -- Refused candidates step back (rows locked elsewhere are left alone). A rate-limited
    -- one steps back until its token is due: its rank in the bucket's line, less the refused
    -- ones ahead of it that are no longer waiting. The window was read before the bucket's
    -- lock, so it can hold tasks another claim took (and paid for) in between: counted, they
    -- pushed every one behind them back by 1/rps each (a burst's worth of time lost when the
    -- claims of a fleet race on one backlog).
    IF v_deferred IS NOT NULL THEN
        WITH waiting AS MATERIALIZED (
            SELECT l.id FROM unnest(v_deferred) AS x (id)
            JOIN harvest.tasks AS l ON l.id = x.id
            WHERE l.status = 'pending'
            FOR UPDATE OF l SKIP LOCKED
        ),
        d AS (
            SELECT x.id, x.rate_key, w.id IS NOT NULL AS waits,
                   x.wait_secs - CASE WHEN x.rate_key IS NULL THEN 0 ELSE coalesce(
                       count(*) FILTER (WHERE w.id IS NULL) OVER (
                           PARTITION BY x.rate_key ORDER BY x.r_rank
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) / x.rps END AS wait_secs
            FROM unnest(v_deferred, v_waits, v_wait_keys, v_wait_ranks, v_wait_rps)
                AS x (id, wait_secs, rate_key, r_rank, rps)
            LEFT JOIN waiting AS w ON w.id = x.id
        )
        -- A rate-limited one is marked (rate_due_at, the same value, in the same write): an
        -- override or its clear finds it there and re-paces it (flow_rate_limits.sql,
        -- _repace_rate_bucket); a capped one is not, nor is a retry's backoff, which writes
        -- due_at alone and so leaves any earlier mark behind.
        UPDATE harvest.tasks AS t
        SET due_at = s.due_at, rate_due_at = CASE WHEN s.rate_key IS NOT NULL THEN s.due_at END
        FROM (SELECT d.id, d.rate_key, p_now + make_interval(secs => greatest(d.wait_secs, 0.001)) AS due_at
              FROM d WHERE d.waits) AS s
        WHERE t.id = s.id;
    END IF;
    RETURN v_admit;
END;
$$;

-- In-flight count of one key: running activity rows, or admitted running runs.
CREATE OR REPLACE FUNCTION harvest._in_flight(p_kind text, p_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL, not SQL: its two statements keep their plans for the session. A SQL
    -- function with sub-SELECTs is never inlined, and it was planned again on every
    -- call (a claim makes one per key of its window).
    IF p_kind = 'workflow' THEN
        RETURN (
            SELECT count(*) FROM harvest.workflow_slots AS s
            JOIN harvest.executions AS e ON e.id = s.execution_id
            WHERE s.concurrency_key = p_key AND e.status = 'RUNNING'
        );
    END IF;
    RETURN (
        SELECT count(*) FROM harvest.tasks AS r
        WHERE r.concurrency_key = p_key AND r.status = 'running' AND r.kind = 'activity'
    );
END;
$$;

-- After a gated claim: admitted runs take their workflow slot, and the buckets
-- pay for the activities claimed (same transaction as the claim). The claimed rows
-- come as the lease returned them: reading them again by id cost a primary-key probe
-- per claimed task, here and in _debit_rate_buckets.
CREATE OR REPLACE FUNCTION harvest._after_gated_claim(p_claimed harvest.tasks[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)
    SELECT t.execution_id, t.concurrency_key, e.workflow_name, p_now
    FROM unnest(p_claimed) AS t
    JOIN harvest.executions AS e ON e.id = t.execution_id
    WHERE t.kind = 'workflow' AND t.concurrency_key IS NOT NULL AND e.status = 'RUNNING'
    ON CONFLICT (execution_id) DO NOTHING;
    PERFORM harvest._debit_rate_buckets(p_claimed, p_now);
END;
$$;

-- A run left RUNNING: give back its workflow slot and its mutexes. Called by the
-- executions_flow_release trigger (sql/triggers.sql) only when its probes found a slot,
-- a held mutex or a queued wait of the run: most runs hold none, and the probes (three
-- index lookups) cost less than this call's DELETE and the mutex tables' queries
-- (docs/performance.md, "SQL path, seventh cut" and "ninth cut"). The slot and the mutex
-- rows of a run are written under its row lock or by a claim, as before; what the probes
-- miss the DELETE would have missed too.
CREATE OR REPLACE FUNCTION harvest._flow_release(p_execution_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM harvest.workflow_slots WHERE execution_id = p_execution_id;
    PERFORM harvest._mutex_release_all(p_execution_id);
END;
$$;

-- Latest wins: admitting a new run of (workflow, key) under cancel_running
-- cancels the oldest non-terminal runs (PAUSED ones too) beyond limit - 1, at most 32 per
-- admission, from a scan bounded to limit + 32 rows, serialised on the key's
-- advisory lock (and its row of harvest.flow_keys, for a start in a snapshot transaction). Each is closed CANCELLED with WorkflowCancelled
-- {details: {superseded_by}}. Returns the ids cancelled.
-- The runs are locked all at once, in id order, then the mutex keys their closes release, in
-- key order, before the first is closed (docs/internals.md, "Lock order"): locked one by one in
-- created_at order, which is not id order (an id's clock is its transaction's and its low bytes
-- are random), a start superseding two runs waited on the second while holding the first, and a
-- group commit of both runs' decisions, locking them in id order, held the second and waited on
-- the first; their keys, released run by run, met a group commit taking them in key order (40P01;
-- tests/integration/test_row_lock_order.py).
CREATE OR REPLACE FUNCTION harvest._supersede(
    p_workflow_name text, p_key text, p_limit integer, p_new_execution_id uuid
)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    c_scan_limit constant integer := 32;
    v_victims uuid[];
    v_victim uuid;
    v_cancelled uuid[] := ARRAY[]::uuid[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_key));
    -- Then the key's row, before the runs are read: a start whose transaction snapshot is
    -- older than another start of the key fails here (40001) instead of missing that run.
    PERFORM harvest._take_flow_key('concurrency', p_key);
    v_victims := ARRAY(
        SELECT s.id FROM (
            SELECT e.id, e.created_at,
                   row_number() OVER (ORDER BY e.created_at DESC, e.id DESC) AS newest
            FROM (
                SELECT x.id, x.created_at FROM harvest.executions AS x
                WHERE x.workflow_name = p_workflow_name AND x.concurrency_key = p_key
                  AND x.status IN ('RUNNING', 'PAUSED') AND x.id <> p_new_execution_id
                ORDER BY x.created_at DESC, x.id DESC
                LIMIT p_limit + c_scan_limit
            ) AS e
        ) AS s
        WHERE s.newest > p_limit - 1
        ORDER BY s.created_at, s.id
        LIMIT c_scan_limit
    );
    IF cardinality(v_victims) = 0 THEN
        RETURN v_cancelled;
    END IF;
    -- All locked first, in id order (the sort is below the row lock), then closed oldest first.
    PERFORM 1 FROM harvest.executions AS e
    WHERE e.id = ANY (v_victims) AND e.status IN ('RUNNING', 'PAUSED')
    ORDER BY e.id FOR UPDATE;
    -- Then the mutex keys their closes release, in key order (flow_mutex.sql).
    PERFORM harvest._lock_mutex_keys(v_victims);
    FOREACH v_victim IN ARRAY v_victims LOOP
        -- (Held already; one closed while this waited, by a cancel that held it, is passed.)
        PERFORM 1 FROM harvest.executions AS e
        WHERE e.id = v_victim AND e.status IN ('RUNNING', 'PAUSED');
        CONTINUE WHEN NOT FOUND;
        PERFORM harvest._append_event(v_victim, 'WorkflowCancelled', jsonb_build_object(
            'details', jsonb_build_object('superseded_by', p_new_execution_id)));
        PERFORM harvest._close_execution(v_victim, 'CANCELLED', NULL, jsonb_build_object(
            'error_type', 'Superseded', 'message', 'superseded by a newer run ' || p_new_execution_id
                || ' of the same key (on_conflict = cancel_running)',
            'non_retryable', true, 'details', jsonb_build_object('superseded_by', p_new_execution_id)));
        v_cancelled := v_cancelled || v_victim;
    END LOOP;
    RETURN v_cancelled;
END;
$$;

-- The live runs that latest-wins starts may supersede (_supersede), read under their keys'
-- locks (_lock_flow_keys_of, taken first, so no start of the key adds a run meanwhile). p_starts:
-- a JSON array of {workflow_name, input}, as _lock_flow_keys_of reads it. Per workflow and
-- key with n starts, the live runs past the newest limit - n, at most 33 * n of them (a start's
-- scan reaches 32 past the limit, each earlier start's closes shift it by at most 32): every
-- run the starts close, and, where a key has more than 32 runs past its limit, one or two more.
CREATE OR REPLACE FUNCTION harvest._superseded_runs(p_starts jsonb)
RETURNS uuid[]
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(array_agg(v.id), '{}')
    FROM (
        SELECT s.start ->> 'workflow_name' AS workflow_name, r.concurrency_key AS key,
               harvest._json_integer(p.policy #> '{concurrency,limit}', 'concurrency.limit', 1) AS max_live, count(*)::integer AS n
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_starts) = 'array' THEN p_starts ELSE '[]' END)
            AS s (start)
        JOIN harvest.flow_policies AS p
          ON p.kind = 'workflow' AND jsonb_typeof(s.start) = 'object'
             AND jsonb_typeof(s.start -> 'workflow_name') = 'string' AND p.name = s.start ->> 'workflow_name'
             AND p.policy #>> '{concurrency,on_conflict}' = 'cancel_running'
        CROSS JOIN LATERAL harvest._resolve_flow_keys(coalesce(s.start -> 'input', '[]'), p.policy) AS r
        WHERE r.concurrency_key IS NOT NULL
        GROUP BY 1, 2, 3
    ) AS k
    CROSS JOIN LATERAL (
        SELECT x.id FROM harvest.executions AS x
        WHERE x.workflow_name = k.workflow_name AND x.concurrency_key = k.key
          AND x.status IN ('RUNNING', 'PAUSED')
        ORDER BY x.created_at DESC, x.id DESC
        OFFSET greatest(k.max_live - k.n, 0) LIMIT 33 * k.n
    ) AS v;
$$;

-- The live keyed runs (RUNNING or PAUSED, with a concurrency key) of the keys p_keys (NULL: every
-- key), each with its workflow's policy and whether it is in flight: it holds a workflow slot
-- (admitted), or its workflow's on_conflict is cancel_running (latest-wins admits every start,
-- so all its live runs work); else it waits for a slot, pending. The one place that rule lives:
-- the status view (_count_concurrency_keys) counts its keys' runs from it, the metrics sampler
-- its keyed-run totals (metrics.sql), so the sampler's _other sum is the status view's. A SQL
-- function of one SELECT, STABLE, run as invoker: the planner inlines it into each caller's
-- query, so p_keys (a constant there) reaches executions_live_concurrency_key as if written
-- there, and picks the slot lookup: for some keys' runs a probe of workflow_slots_pkey a run (a
-- scalar subquery: never hashed), for every key's one hashed read of the slots (an EXISTS).
-- (A LEFT JOIN, or an EXISTS, left the choice to the planner's costs, which hashed every slot of
-- the database for a page of 100 keys: 20,000 slot rows.)
CREATE OR REPLACE FUNCTION harvest._live_keyed_runs(p_keys text[])
RETURNS TABLE (concurrency_key text, workflow_name text, policy jsonb, in_flight boolean)
LANGUAGE sql STABLE
AS $$
    SELECT
        e.concurrency_key, e.workflow_name, p.policy,
        p.policy #>> '{concurrency,on_conflict}' IS NOT DISTINCT FROM 'cancel_running'
        OR CASE WHEN p_keys IS NULL
                THEN EXISTS (SELECT 1 FROM harvest.workflow_slots AS s WHERE s.execution_id = e.id)
                ELSE (SELECT true FROM harvest.workflow_slots AS s WHERE s.execution_id = e.id) IS NOT NULL
           END
    FROM harvest.executions AS e
    LEFT JOIN harvest.flow_policies AS p ON p.kind = 'workflow' AND p.name = e.workflow_name
    WHERE e.status IN ('RUNNING', 'PAUSED') AND e.concurrency_key IS NOT NULL
      AND (p_keys IS NULL OR e.concurrency_key = ANY (p_keys));
$$;

-- The counts of list_concurrency_keys, for the keys p_keys (NULL: every key) after p_after_key
-- (NULL: from the first), in key order: the one place a key's in flight and pending are
-- counted, for the status view and for the metrics sampler's exported keys (metrics.sql). With
-- p_other_runs (the sampler's), the live keyed runs of the keys not in p_keys are counted on the
-- same pass, as one workflow row with a NULL key, last: the sampler's totals without a second
-- read of every keyed run.
CREATE OR REPLACE FUNCTION harvest._count_concurrency_keys(p_keys text[], p_after_key text, p_other_runs boolean)
RETURNS TABLE (
    key text, task_type text, max_concurrent integer, in_flight bigint, pending bigint, workflows jsonb
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Planned with the values at each call (EXECUTE), never from a cached generic plan: with
    -- `$1 IS NULL OR key = ANY ($1)` unknown, such a plan reads every keyed row whatever the keys.
    -- (A run is in flight or pending: pending is counted as the rest, as one count of in_flight
    -- plans the in-flight rule's slot lookup, an EXISTS, once, and two would plan it twice.)
    RETURN QUERY EXECUTE $q$
    WITH activity_keys AS (
        SELECT t.concurrency_key AS key, max(t.concurrency_limit) AS max_concurrent,
               count(*) FILTER (WHERE t.status = 'running') AS in_flight,
               count(*) FILTER (WHERE t.status = 'pending') AS pending
        FROM harvest.tasks AS t
        WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL
          AND ($1::text[] IS NULL OR t.concurrency_key = ANY ($1))
          AND ($2::text IS NULL OR t.concurrency_key > $2)
        GROUP BY t.concurrency_key
    ),
    workflow_keys AS (
        SELECT CASE WHEN $3 AND $1::text[] IS NOT NULL THEN k.key ELSE r.concurrency_key END AS key,
               r.workflow_name,
               harvest._json_integer(r.policy #> '{concurrency,limit}', 'concurrency.limit', 1) AS max_concurrent,
               coalesce(r.policy #>> '{concurrency,on_conflict}', 'defer') AS on_conflict,
               count(*) AS runs,
               count(*) FILTER (WHERE r.in_flight) AS in_flight
        FROM harvest._live_keyed_runs(CASE WHEN $3 THEN NULL ELSE $1::text[] END) AS r
        -- The keys asked for, joined (hashed) for the other runs' row; a key = ANY ($1) out of
        -- the WHERE is a linear search of the array for each run.
        LEFT JOIN (SELECT DISTINCT u.key FROM unnest($1::text[]) AS u (key) WHERE $3) AS k
          ON k.key = r.concurrency_key
        WHERE ($2::text IS NULL OR r.concurrency_key > $2)
        GROUP BY 1, r.workflow_name, r.policy
    )
    SELECT a.key, 'activity'::text, a.max_concurrent, a.in_flight, a.pending, NULL::jsonb
    FROM activity_keys AS a
    UNION ALL
    SELECT w.key, 'workflow'::text, max(w.max_concurrent), sum(w.in_flight)::bigint,
           sum(w.runs - w.in_flight)::bigint,
           jsonb_agg(jsonb_build_object('workflow_name', w.workflow_name, 'on_conflict', w.on_conflict)
                     ORDER BY w.workflow_name)
    FROM workflow_keys AS w
    GROUP BY w.key
    ORDER BY 1, 2
    $q$ USING p_keys, p_after_key, p_other_runs;
END;
$$;

-- Concurrency status per key, the shape of the spec's GET /admin/concurrency:
-- key, task_type, max_concurrent, in_flight, pending, and for workflow keys the
-- workflows with live work on the key and their on_conflict. In key order, a page at a time:
-- p_limit keys at most (a key's activity and workflow rows stay on one page) after p_after_key;
-- NULL, every key (100,000 tenants are 100,000 keys: the route and the dashboard page them,
-- migration 0100). A page's keys are read down tasks_activity_concurrency_key and
-- executions_live_concurrency_key in key order, and only those keys' rows are counted.
CREATE OR REPLACE FUNCTION harvest.list_concurrency_keys(
    p_key text DEFAULT NULL, p_after_key text DEFAULT NULL, p_limit integer DEFAULT NULL
)
RETURNS TABLE (
    key text, task_type text, max_concurrent integer, in_flight bigint, pending bigint, workflows jsonb
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_keys text[];
BEGIN
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001',
            HINT = 'pass NULL for every key';
    END IF;
    -- Planned with the values at each call (EXECUTE), as _count_concurrency_keys is: with
    -- `$1 IS NULL OR key > $1` unknown, a generic plan reads every keyed row whatever the page.
    IF p_key IS NOT NULL THEN
        v_keys := CASE WHEN p_after_key IS NULL OR p_key > p_after_key THEN ARRAY[p_key] ELSE '{}' END;
    ELSIF p_limit IS NOT NULL THEN
        -- Each list's first p_limit distinct keys after the position, then the first p_limit of both.
        EXECUTE $q$
        SELECT coalesce(array_agg(u.key ORDER BY u.key), '{}') FROM (
            SELECT k.key FROM (
                (SELECT DISTINCT t.concurrency_key AS key FROM harvest.tasks AS t
                 WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL
                   AND ($1::text IS NULL OR t.concurrency_key > $1)
                 ORDER BY 1 LIMIT $2)
                UNION
                (SELECT DISTINCT e.concurrency_key FROM harvest.executions AS e
                 WHERE e.status IN ('RUNNING', 'PAUSED') AND e.concurrency_key IS NOT NULL
                   AND ($1::text IS NULL OR e.concurrency_key > $1)
                 ORDER BY 1 LIMIT $2)
            ) AS k
            ORDER BY 1 LIMIT $2
        ) AS u
        $q$ INTO v_keys USING p_after_key, p_limit;
    END IF;
    RETURN QUERY SELECT * FROM harvest._count_concurrency_keys(v_keys, p_after_key, false);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.declare_flow_policies IS
'Declare an App''s flow policies ({"workflows": {...}, "activities": {...}}: concurrency, quotas, start gates, '
'max_concurrent, rate limits); names not listed keep their last declaration; returns how many were written, a '
'malformed policy raises HR001. Called by the worker at start-up (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_concurrency_keys IS
'Concurrency per key (one key, or all), in key order: task type, max_concurrent, in flight, pending, and for '
'workflow keys the workflows holding live work on it; at most p_limit keys (1..10000) after p_after_key, NULL: every '
'key. For operators (role harvest_reader).';
