-- Per-tenant quotas, checked inside the start transaction (start.sql). The
-- quota key is resolved from the input by the same dot-path resolver as the
-- concurrency key (harvest._resolve_key) and stamped on executions.quota_key.
-- Concurrent starts of one key serialise on the key's row of harvest.flow_keys,
-- updated before the usage is counted (a later statement, so at READ COMMITTED it
-- sees every committed start), so a quota is never exceeded by a race. A start whose
-- transaction reads one snapshot (REPEATABLE READ, SERIALIZABLE: a start inside the
-- caller's own transaction) would count with a snapshot older than the lock; the
-- update fails it instead (40001, serialization_failure: retry the transaction) when
-- another start of the key committed after that snapshot. (An advisory lock did the
-- serialising before 0082 and let such a start exceed the quota.) A refused start
-- raises HR006 naming the quota, the key, the usage and the limit; DETAIL is the same
-- as JSON, and the key's row is not updated (the raise rolls it back).
--
-- Usage: active = live (RUNNING, PAUSED) runs with the key, read through
-- executions_live_quota_key (its live runs only: the same status set), whatever the key's
-- kept history;
-- history bytes = the sum of executions.history_bytes (each event's JSON text bytes,
-- harvest._event_bytes: the measure of the history byte cap too) of every kept run with the
-- key: its live runs' read through executions_live_quota_key, its ended runs' kept in
-- harvest.quota_ended_bytes (sql/flow.sql: written by the triggers of the statements that end,
-- move or delete a run, sql/triggers.sql; migration 0103), a few rows a key, not a row per run;
-- dead letters = parked failures (an activity's, or a run's of kind 'workflow') of runs with the
-- key, counted down dead_letters_quota_key: each dead letter carries its run's key, set from the
-- run as it is parked (sql/triggers.sql, dead_letters_quota_key; migration 0106), so neither the
-- key's kept runs nor other keys' dead letters are read.

CREATE OR REPLACE FUNCTION harvest._check_quota(p_workflow_name text, p_key text, p_quota jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_limit bigint;
    v_usage bigint;
    v_name text;
BEGIN
    PERFORM harvest._take_flow_key('quota', p_key);
    -- The key's ended bytes in one row again (a row per run that ended since its last start):
    -- a max_history_bytes count below reads one row of them. Every quota'd start folds, whatever
    -- its quotas, since every quota'd run's end adds a row: a key under max_active_executions
    -- alone keeps one row, not one per ended run. Under the key's row, so its starts fold in turn.
    PERFORM harvest._fold_quota_bytes(ARRAY[p_key]);
    FOREACH v_name IN ARRAY ARRAY['max_active_executions', 'max_history_bytes', 'max_dead_letters'] LOOP
        v_limit := harvest._json_bigint(p_quota -> v_name, 'quota.' || v_name, 0,
                                        p_where => 'workflow ' || p_workflow_name);
        CONTINUE WHEN v_limit IS NULL;
        v_usage := harvest.quota_usage(p_key, v_name);
        IF (v_name = 'max_active_executions' AND v_usage + 1 > v_limit)
           OR (v_name <> 'max_active_executions' AND v_usage >= v_limit) THEN
            RAISE EXCEPTION 'quota % of key "%" is exhausted: usage % of % (workflow %)',
                v_name, p_key, v_usage, v_limit, p_workflow_name
                USING ERRCODE = 'HR006',
                DETAIL = jsonb_build_object('quota', v_name, 'key', p_key, 'usage', v_usage,
                                            'limit', v_limit, 'workflow_name', p_workflow_name)::text,
                HINT = 'wait for runs of this key to finish, or raise the quota';
        END IF;
    END LOOP;
END;
$$;

-- Take a flow key's row (sql/flow.sql, harvest.flow_keys), for a start under the key or for a
-- decision or a batch taking its starts' keys first (decide.sql, _lock_flow_keys_of): the row
-- lock serialises the key's starts until commit, and in a REPEATABLE READ or SERIALIZABLE
-- transaction whose snapshot predates another start of the key the update fails (40001)
-- instead of letting the caller count the key's runs without that start. The update changes
-- nothing but is what counts: the lock, the 40001, and the xmin the janitor reads
-- (retention.sql, prune_flow_keys).
CREATE OR REPLACE FUNCTION harvest._take_flow_key(p_kind text, p_key text)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO harvest.flow_keys AS f (kind, key) VALUES (p_kind, p_key)
    ON CONFLICT (kind, key) DO UPDATE SET key = f.key;
$$;

-- Fold the ended-bytes rows of the keys (sql/flow.sql, harvest.quota_ended_bytes) into one a key
-- (none when they sum to 0): a quota'd start of a key (_check_quota) and a delete
-- of ended runs (sql/triggers.sql, _executions_quota_bytes_deleted). The rows it takes it deletes
-- and adds back as their sum, in one statement, so every total is the same before and after. It
-- takes only the rows it can lock at once (SKIP LOCKED): two folds of a key split its rows, neither
-- waits, and neither can join a deadlock. Only at READ COMMITTED: in a REPEATABLE READ or
-- SERIALIZABLE transaction a row another fold deleted after the snapshot would fail the delete
-- (40001), a failure the check did not have; such a start reads the rows as they are. A key
-- whose starts all run so is folded by the janitor's round instead (retention.sql,
-- prune_flow_keys), or its rows would grow by one per ended run.
CREATE OR REPLACE FUNCTION harvest._fold_quota_bytes(p_keys text[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    -- One key with fewer than two rows: nothing to fold (a start's common case, no write).
    IF cardinality(p_keys) = 1 AND (SELECT count(*) FROM (
            SELECT 1 FROM harvest.quota_ended_bytes AS b WHERE b.quota_key = p_keys[1] LIMIT 2) AS r) < 2 THEN
        RETURN;
    END IF;
    WITH taken AS (
        DELETE FROM harvest.quota_ended_bytes AS b
        WHERE b.ctid = ANY (ARRAY(
            SELECT q.ctid FROM harvest.quota_ended_bytes AS q
            WHERE q.quota_key = ANY (p_keys)
            FOR UPDATE SKIP LOCKED))
        RETURNING b.quota_key, b.bytes
    )
    INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
    SELECT t.quota_key, sum(t.bytes) FROM taken AS t
    GROUP BY t.quota_key HAVING sum(t.bytes) <> 0;
END;
$$;

-- One quota's current usage for a key.
CREATE OR REPLACE FUNCTION harvest.quota_usage(p_key text, p_quota text)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    CASE p_quota
    WHEN 'max_active_executions' THEN
        RETURN (SELECT count(*) FROM harvest.executions AS e
                WHERE e.quota_key = p_key AND e.status IN ('RUNNING', 'PAUSED'));  -- a paused run counts
    WHEN 'max_history_bytes' THEN
        -- One statement, so one snapshot for both halves: a run ending meanwhile (its row leaves
        -- RUNNING and its bytes are added in one transaction) is counted once, live or ended.
        RETURN (SELECT (SELECT coalesce(sum(e.history_bytes), 0) FROM harvest.executions AS e
                        WHERE e.quota_key = p_key AND e.status IN ('RUNNING', 'PAUSED'))::bigint
                     + (SELECT coalesce(sum(b.bytes), 0) FROM harvest.quota_ended_bytes AS b
                        WHERE b.quota_key = p_key)::bigint);
    WHEN 'max_dead_letters' THEN
        -- A dead letter carries its run's key (sql/triggers.sql, dead_letters_quota_key): the
        -- key's dead letters alone, not its kept runs joined to them (migration 0106).
        RETURN (SELECT count(*) FROM harvest.dead_letters AS d WHERE d.quota_key = p_key);
    ELSE
        RAISE EXCEPTION 'unknown quota "%"', p_quota USING ERRCODE = 'HR001',
            HINT = 'use max_active_executions, max_history_bytes or max_dead_letters';
    END CASE;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.quota_usage IS
'One quota''s current usage for a key: max_active_executions, max_history_bytes or max_dead_letters (else HR001).'
' For operators (role harvest_reader).';
