-- 0103: the max_history_bytes quota reads its key's ended runs' bytes from a few rows, not from
-- every kept run of the key (re-runnable: IF NOT EXISTS, CREATE OR REPLACE, DROP ... IF EXISTS,
-- and the backfill recomputes the totals from scratch).
--
-- A start of a workflow with max_history_bytes summed executions.history_bytes over every kept run
-- of its key (functions/flow_quotas.sql, quota_usage), through executions_quota_key: 1.8 ms at
-- 10,000 kept runs, 9.4 ms at 50,000, on each start of the key. An ended run's bytes no longer
-- change, so they are now written to harvest.quota_ended_bytes when the run ends, moves or is
-- deleted (the triggers below), and the check sums them (a row or a few a key) and the key's live
-- runs (executions_live_quota_key, migration 0088). The figure is the same sum.
--
-- The backfill is one statement, in this migration's transaction, after the triggers: creating
-- a trigger takes harvest.executions' SHARE ROW EXCLUSIVE lock, which waits for the transactions
-- writing runs and keeps new writes out until the commit, so the sum reads every ended run as it
-- is for good and no close can fall between it and the triggers (batches in their own
-- transactions would each race the closes of their keys). The price is that hold: one read of
-- executions_quota_key's runs (the quota'd runs only), during which no run is started, decided
-- or closed (0.07 to 0.10 s for 100,000 quota'd runs of 1,000 keys beside 100,000 runs
-- without a key, the whole migration, on the loaded 2-core machine of docs/performance.md, "A
-- quota key's ended bytes").
-- Re-running replaces the triggers (DROP TRIGGER: the ACCESS EXCLUSIVE lock, to the commit) and
-- recomputes every total.
CREATE TABLE IF NOT EXISTS harvest.quota_ended_bytes (
    quota_key text NOT NULL,
    bytes bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS quota_ended_bytes_key
ON harvest.quota_ended_bytes (quota_key);

-- The delete trigger's fold; functions/flow_quotas.sql replaces it with the same statements.
CREATE OR REPLACE FUNCTION harvest._fold_quota_bytes(p_keys text[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
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

-- The max_history_bytes quota's ended bytes (sql/flow.sql, harvest.quota_ended_bytes): a quota'd
-- row entering or leaving the ended side (not RUNNING or PAUSED: a close, a shard move's seal or
-- staged copy and its activation), or an ended row whose key or bytes change (the continue-as-new
-- event, appended to the run after its close; a move's staged copy over a seal, a discarded copy
-- restoring the seal), adds a row of the difference. history_bytes is in the column list for the
-- appends after a close: every append tests the WHEN, which for a live run is false at its first
-- terms and calls nothing (no statement, no write); so is a close of a run without a quota key. A
-- row, never an update of a total: no lock, so closes of one key never wait for each other, and
-- a batch closing runs of two keys never deadlocks with one closing them in the other order.
CREATE OR REPLACE FUNCTION harvest._executions_quota_bytes()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
    SELECT d.quota_key, sum(d.bytes) FROM (
        SELECT OLD.quota_key, -OLD.history_bytes
        WHERE TG_OP = 'UPDATE' AND OLD.quota_key IS NOT NULL AND OLD.status NOT IN ('RUNNING', 'PAUSED')
        UNION ALL
        SELECT NEW.quota_key, NEW.history_bytes
        WHERE NEW.quota_key IS NOT NULL AND NEW.status NOT IN ('RUNNING', 'PAUSED')
    ) AS d (quota_key, bytes)
    GROUP BY d.quota_key HAVING sum(d.bytes) <> 0;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS executions_quota_bytes_insert ON harvest.executions;
CREATE TRIGGER executions_quota_bytes_insert
AFTER INSERT ON harvest.executions
FOR EACH ROW
WHEN (new.quota_key IS NOT NULL AND new.status NOT IN ('RUNNING', 'PAUSED'))
EXECUTE FUNCTION harvest._executions_quota_bytes();

DROP TRIGGER IF EXISTS executions_quota_bytes_update ON harvest.executions;
CREATE TRIGGER executions_quota_bytes_update
AFTER UPDATE OF status, quota_key, history_bytes ON harvest.executions
FOR EACH ROW
WHEN (
    (
        old.quota_key IS NOT NULL AND old.status NOT IN ('RUNNING', 'PAUSED')
        OR new.quota_key IS NOT NULL AND new.status NOT IN ('RUNNING', 'PAUSED')
    )
    AND (old.status, old.quota_key, old.history_bytes)
    IS DISTINCT FROM (new.status, new.quota_key, new.history_bytes)
)
EXECUTE FUNCTION harvest._executions_quota_bytes();

-- A delete of ended quota'd runs (retention, a discarded staged copy, an operator's DELETE)
-- takes their bytes off their keys: one row per key and statement, then the keys' rows folded
-- (_fold_quota_bytes, functions/flow_quotas.sql), so a janitor that deletes a key's history
-- leaves it one row, not a row per close and per batch. Once per DELETE statement, over the
-- deleted rows only.
CREATE OR REPLACE FUNCTION harvest._executions_quota_bytes_deleted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_keys text [];
BEGIN
    WITH spent AS (
        INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
        SELECT g.quota_key, -sum(g.history_bytes) FROM gone AS g
        WHERE g.quota_key IS NOT NULL AND g.status NOT IN ('RUNNING', 'PAUSED')
        GROUP BY g.quota_key HAVING sum(g.history_bytes) <> 0
        RETURNING quota_key
    )
    SELECT array_agg(s.quota_key ORDER BY s.quota_key) INTO v_keys FROM spent AS s;
    IF v_keys IS NOT NULL THEN
        PERFORM harvest._fold_quota_bytes(v_keys);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS executions_quota_bytes_delete ON harvest.executions;
CREATE TRIGGER executions_quota_bytes_delete
AFTER DELETE ON harvest.executions
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT
EXECUTE FUNCTION harvest._executions_quota_bytes_deleted();

-- A TRUNCATE of the runs leaves no ended bytes to count.
CREATE OR REPLACE FUNCTION harvest._executions_quota_bytes_truncated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM harvest.quota_ended_bytes;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS executions_quota_bytes_truncate ON harvest.executions;
CREATE TRIGGER executions_quota_bytes_truncate
AFTER TRUNCATE ON harvest.executions
FOR EACH STATEMENT
EXECUTE FUNCTION harvest._executions_quota_bytes_truncated();

-- The totals of the runs kept now, under the triggers' lock (see above).
DELETE FROM harvest.quota_ended_bytes;
INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
SELECT
    e.quota_key,
    sum(e.history_bytes) AS bytes
FROM harvest.executions AS e
WHERE e.quota_key IS NOT NULL AND e.status NOT IN ('RUNNING', 'PAUSED')
GROUP BY e.quota_key
HAVING sum(e.history_bytes) <> 0;
