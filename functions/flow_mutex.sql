-- The durable mutex (ctx.mutex(key)): one holder per key, FIFO waiters, kept in
-- harvest.mutex_locks and harvest.mutex_waiters. Every acquire, release and
-- grant serialises on pg_advisory_xact_lock(hashtext('harvest.mutex:' || key)).
--
-- A workflow asks with a record_marker command of kind "mutex_acquire" (value
-- {key}) and gives the key back with kind "mutex_release" (value {key});
-- _decide_record_marker (decide.sql) applies both with _mutex_marker in the same
-- transaction as the workflow task that issued them. Only the decision does: a
-- history copied into another run (a reset's fork, a moved run) takes no key. A grant appends the
-- resolution event MutexAcquired {seq, key} to the holder's history, where seq
-- is the seq of its acquire marker, and wakes it. A run that leaves RUNNING
-- (finish, failure, cancel, terminate, timeout, reset, supersede) releases
-- every key it holds or waits for (trigger executions_flow_release), so a crash
-- never leaves a key held: a crashed worker's run is still RUNNING and resumes
-- on another worker holding its key, exactly as before the crash.
--
-- Granting to a waiter appends to the waiter's history, which needs its row
-- lock. The releasing transaction already holds its own execution row, so it
-- takes the waiter's with SKIP LOCKED and never waits; a waiter it could not
-- lock is granted by harvest.grant_mutexes(), which the worker's scanner calls.

-- Apply a mutex marker of a locked running execution.
CREATE OR REPLACE FUNCTION harvest._mutex_marker(p_execution_id uuid, p_seq integer, p_kind text, p_key text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'mutex key is empty' USING ERRCODE = 'HR001';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('harvest.mutex:' || p_key));
    IF p_kind = 'mutex_acquire' THEN
        INSERT INTO harvest.mutex_waiters (lock_key, execution_id, seq, enqueued_at)
        VALUES (p_key, p_execution_id, p_seq, harvest.now())
        ON CONFLICT (execution_id, seq) DO NOTHING;
    ELSE
        -- A release gives the key back, or withdraws a request still queued (a
        -- wait that was cancelled in the workflow).
        DELETE FROM harvest.mutex_locks AS l
        WHERE l.lock_key = p_key AND l.holder_execution_id = p_execution_id;
        DELETE FROM harvest.mutex_waiters AS w
        WHERE w.lock_key = p_key AND w.execution_id = p_execution_id;
    END IF;
    PERFORM harvest._mutex_grant_next(p_key, p_execution_id);
END;
$$;

-- Give a free key to its oldest waiter (the caller holds the key's advisory lock).
-- p_self is the execution whose row the caller already holds.
CREATE OR REPLACE FUNCTION harvest._mutex_grant_next(p_key text, p_self uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_waiter harvest.mutex_waiters;
BEGIN
    IF EXISTS (SELECT 1 FROM harvest.mutex_locks AS l WHERE l.lock_key = p_key) THEN
        RETURN false;
    END IF;
    SELECT * INTO v_waiter FROM harvest.mutex_waiters AS w
    WHERE w.lock_key = p_key ORDER BY w.id LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_waiter.execution_id IS DISTINCT FROM p_self THEN
        PERFORM 1 FROM harvest.executions AS e
        WHERE e.id = v_waiter.execution_id AND e.status IN ('RUNNING', 'PAUSED') FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;  -- its row is busy: grant_mutexes grants it
        END IF;
    END IF;
    DELETE FROM harvest.mutex_waiters AS w WHERE w.id = v_waiter.id;
    INSERT INTO harvest.mutex_locks (lock_key, holder_execution_id, acquired_at)
    VALUES (p_key, v_waiter.execution_id, harvest.now());
    PERFORM harvest._append_event(v_waiter.execution_id, 'MutexAcquired',
        jsonb_build_object('seq', v_waiter.seq, 'key', p_key));
    PERFORM harvest._ensure_workflow_task(v_waiter.execution_id);
    RETURN true;
END;
$$;

-- Release every key a run holds or waits for, and hand each on.
CREATE OR REPLACE FUNCTION harvest._mutex_release_all(p_execution_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
BEGIN
    FOR v_key IN
        SELECT k.lock_key FROM (
            SELECT l.lock_key FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = p_execution_id
            UNION
            SELECT w.lock_key FROM harvest.mutex_waiters AS w WHERE w.execution_id = p_execution_id
        ) AS k ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('harvest.mutex:' || v_key));
        DELETE FROM harvest.mutex_waiters AS w WHERE w.execution_id = p_execution_id AND w.lock_key = v_key;
        DELETE FROM harvest.mutex_locks AS l
        WHERE l.holder_execution_id = p_execution_id AND l.lock_key = v_key;
        PERFORM harvest._mutex_grant_next(v_key, p_execution_id);
    END LOOP;
END;
$$;

-- Lock, in key order, the keys p_keys names and every key the runs p_runs hold or wait for
-- (their closes release them: _mutex_release_all), for a transaction about to act on several runs
-- whose rows it holds already (docs/internals.md, "Lock order", 5): a group commit
-- (_lock_batch_mutexes), a start superseding runs (_supersede), a schedule slot ending them
-- (_fire_slot). Taken run by run as each closed, one transaction took b (the first run's) then a
-- (the second's) while another took a then b: 40P01 (tests/integration/test_row_lock_order.py).
-- What a run holds or waits for changes only under its row lock (a grant takes the row SKIP
-- LOCKED), so the set read here is the set its close releases.
CREATE OR REPLACE FUNCTION harvest._lock_mutex_keys(p_runs uuid[], p_keys text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
BEGIN
    FOR v_key IN
        SELECT k.key FROM (
            SELECT u.key FROM unnest(p_keys) AS u (key) WHERE u.key <> ''
            UNION
            SELECT l.lock_key FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = ANY (p_runs)
            UNION
            SELECT w.lock_key FROM harvest.mutex_waiters AS w WHERE w.execution_id = ANY (p_runs)
        ) AS k
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('harvest.mutex:' || v_key));
    END LOOP;
END;
$$;

-- Grant free keys whose head waiter could not be locked at release time.
CREATE OR REPLACE FUNCTION harvest.grant_mutexes(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
    v_granted integer := 0;
BEGIN
    PERFORM harvest._check_limit('grant_mutexes', p_limit, 10000);
    FOR v_key IN
        SELECT DISTINCT w.lock_key FROM harvest.mutex_waiters AS w
        WHERE NOT EXISTS (SELECT 1 FROM harvest.mutex_locks AS l WHERE l.lock_key = w.lock_key)
        ORDER BY 1 LIMIT p_limit
    LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('harvest.mutex:' || v_key));
        IF harvest._mutex_grant_next(v_key) THEN
            v_granted := v_granted + 1;
        END IF;
    END LOOP;
    RETURN v_granted;
END;
$$;

-- Holders and waiters of one key (or all keys), for operators.
CREATE OR REPLACE FUNCTION harvest.list_mutexes(p_key text DEFAULT NULL)
RETURNS TABLE (lock_key text, holder_execution_id uuid, acquired_at timestamptz, waiters jsonb)
LANGUAGE sql STABLE
AS $$
    SELECT k.lock_key, l.holder_execution_id, l.acquired_at,
           coalesce((SELECT jsonb_agg(w.execution_id ORDER BY w.id) FROM harvest.mutex_waiters AS w
                     WHERE w.lock_key = k.lock_key), '[]'::jsonb)
    FROM (SELECT m.lock_key FROM harvest.mutex_locks AS m
          UNION SELECT w.lock_key FROM harvest.mutex_waiters AS w) AS k
    LEFT JOIN harvest.mutex_locks AS l ON l.lock_key = k.lock_key
    WHERE p_key IS NULL OR k.lock_key = p_key
    ORDER BY 1;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.grant_mutexes IS
'Grant free mutex keys whose head waiter could not be granted at release time; returns how many were granted. '
'Called by the scanner, harvest.scan (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_mutexes IS
'Holders and FIFO waiters of one mutex key (or all keys). For operators (role harvest_reader).';
