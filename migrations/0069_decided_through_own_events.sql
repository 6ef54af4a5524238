-- 0069: a decision's own events count as read by the worker that decided it.
-- harvest._append_events takes p_own_events (its decided_through then covers the
-- decision's own events, which the next claim of the run leaves out: docs/performance.md,
-- "Fan-out row, twelfth cut"). The new signature is created here, as functions/core.sql
-- defines it, so no caller finds it missing before that file is applied (the old
-- six-argument calls resolve to it), as 0065 did; the old one goes (a call with six
-- arguments would match both). (Absent on a fresh install: the functions are installed
-- after the migrations.)
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint, boolean);

CREATE OR REPLACE FUNCTION harvest._append_events(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[],
    p_decided_by text DEFAULT NULL, p_decided_through bigint DEFAULT NULL,
    p_wake_hold boolean DEFAULT false, p_own_events boolean DEFAULT false,
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
        decided_through = CASE WHEN p_decided_through IS NULL THEN x.decided_through
                               WHEN p_own_events THEN x.last_event_id + v_count
                               ELSE p_decided_through END,
        wake_hold = CASE WHEN p_decided_through IS NULL THEN x.wake_hold ELSE coalesce(p_wake_hold, false) END
    WHERE x.id = p_execution_id
    RETURNING x.last_event_id, x.history_bytes, x.status INTO last_event_id, history_bytes, execution_status;
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT p_execution_id, last_event_id - v_count + e.n, e.event_type, coalesce(e.event_data, '{}'::jsonb),
           harvest.now()
    FROM unnest(p_event_types, p_event_datas) WITH ORDINALITY AS e (event_type, event_data, n);
    PERFORM harvest._notify_events(p_execution_id);  -- only while a process streams (event_streams.sql)
END;
$$;
