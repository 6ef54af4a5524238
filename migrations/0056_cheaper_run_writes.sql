-- 0056: cheaper writes of a run's row on the SQL path (docs/performance.md, "SQL path,
-- seventh cut").
--
-- harvest.executions gets fillfactor 70: a run's row is updated on every event append
-- and at its end, and a batch of starts (_start_plain_batch) writes its rows into full
-- pages, so most of those updates found no room on the row's page and were not HOT
-- (each wrote an entry into every index of the table). From now on each page keeps 30%
-- free for the updates of its rows; existing pages are not rewritten (no table scan, no
-- lock beyond SHARE UPDATE EXCLUSIVE).
ALTER TABLE harvest.executions SET (fillfactor = 70);

-- _append_events returns the run's counters and status as the append left them (a
-- decision's history caps read them instead of reading the row again). A new return
-- type needs a DROP; it is created again here, as functions/core.sql defines it, so no
-- caller finds it missing before that file is applied. (Absent on a fresh install: the
-- functions are installed after the migrations.)
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint);

CREATE OR REPLACE FUNCTION harvest._append_events(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[],
    p_decided_by text DEFAULT NULL, p_decided_through bigint DEFAULT NULL,
    OUT last_event_id bigint, OUT history_bytes bigint, OUT execution_status text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer := cardinality(p_event_types);
BEGIN
    UPDATE harvest.executions AS x
    SET last_event_id = x.last_event_id + v_count,
        history_bytes = x.history_bytes + (
            SELECT sum(harvest._event_bytes(coalesce(d.data, '{}'::jsonb)))
            FROM unnest(p_event_datas) AS d (data)),
        decided_by = CASE WHEN p_decided_through IS NULL THEN x.decided_by ELSE p_decided_by END,
        decided_through = coalesce(p_decided_through, x.decided_through)
    WHERE x.id = p_execution_id
    RETURNING x.last_event_id, x.history_bytes, x.status INTO last_event_id, history_bytes, execution_status;
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT p_execution_id, last_event_id - v_count + e.n, e.event_type, coalesce(e.event_data, '{}'::jsonb),
           harvest.now()
    FROM unnest(p_event_types, p_event_datas) WITH ORDINALITY AS e (event_type, event_data, n);
    PERFORM harvest._notify_events(p_execution_id);  -- only while a process streams (event_streams.sql)
END;
$$;

CREATE OR REPLACE FUNCTION harvest._append_event(
    p_execution_id uuid, p_event_type text, p_event_data jsonb
)
RETURNS bigint
LANGUAGE sql
AS $$
    SELECT (harvest._append_events(p_execution_id, ARRAY[p_event_type], ARRAY[p_event_data])).last_event_id;
$$;
