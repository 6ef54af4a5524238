-- 0073: a result or decision batch's appends' row updates of harvest.executions in one
-- statement (docs/performance.md, "One statement per batch for the appends' row updates").
-- harvest._apply_decision returns what it left of a decision's one append's row update
-- (deferred_bytes, deferred_through, deferred_hold) and whether the caller is to check the
-- history caps (caps_pending); harvest._write_held takes the held rows (harvest.held_run_row,
-- below), which it writes with harvest._update_held_rows. The old signatures go here; the new ones are installed with the
-- functions, after the migrations (their callers are all in functions/).
DROP FUNCTION IF EXISTS harvest._apply_decision(
    uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint, harvest.executions, text[],
    integer, text, boolean, boolean
);
DROP FUNCTION IF EXISTS harvest._write_held(
    uuid[], bigint[], text[], jsonb[], harvest.executions[], uuid[], integer[], jsonb[], text, timestamptz
);
CREATE TYPE harvest.held_run_row AS (
    id uuid,
    last_event_id bigint,
    n integer,
    bytes bigint,
    decided_through bigint,
    wake_hold boolean,
    status text,
    output jsonb,
    failure jsonb
);
