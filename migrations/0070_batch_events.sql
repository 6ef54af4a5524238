-- 0070: a result or decision batch's events, and a result batch's handed activities, in one
-- statement each (docs/performance.md, "One statement per batch for a result batch's
-- appends"). harvest._append_events and harvest._append_closing_events take p_defer (the
-- row updated, the events left to the caller's harvest._insert_events), and
-- harvest._apply_decision takes p_defer_events and p_defer_hand and returns what it left
-- (deferred_types, deferred_datas, deferred_last, deferred_hand_seq, deferred_hand). The
-- old signatures go here (a call with the old arguments would match both). The new
-- _append_events is created here too, as functions/core.sql defines it, so that the many
-- callers in other function files find it between this migration and that file's install
-- (the old seven-argument calls resolve to it), as 0065 and 0069 did; the other two are
-- installed with the functions, after the migrations (their callers are fewer, as 0066's).
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint, boolean, boolean);
DROP FUNCTION IF EXISTS harvest._append_closing_events(uuid, text[], jsonb[], text, bigint, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS harvest._apply_decision(
    uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint, harvest.executions, text[],
    integer, text
);

CREATE OR REPLACE FUNCTION harvest._append_events(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[],
    p_decided_by text DEFAULT NULL, p_decided_through bigint DEFAULT NULL,
    p_wake_hold boolean DEFAULT false, p_own_events boolean DEFAULT false,
    p_defer boolean DEFAULT false,
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
    IF p_defer THEN
        RETURN;  -- (the caller's _insert_events, with its notification)
    END IF;
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT p_execution_id, last_event_id - v_count + e.n, e.event_type, coalesce(e.event_data, '{}'::jsonb),
           harvest.now()
    FROM unnest(p_event_types, p_event_datas) WITH ORDINALITY AS e (event_type, event_data, n);
    PERFORM harvest._notify_events(p_execution_id);  -- only while a process streams (event_streams.sql)
END;
$$;
