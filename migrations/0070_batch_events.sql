-- 0070: a result or decision batch's events, and a result batch's handed activities, in one
-- statement each (docs/performance.md, "One statement per batch for a result batch's
-- appends"). harvest._append_events and harvest._append_closing_events take p_defer (the
-- row updated, the events left to the caller's harvest._insert_events), and
-- harvest._apply_decision takes p_defer_events and p_defer_hand and returns what it left
-- (deferred_types, deferred_datas, deferred_last, deferred_hand_seq, deferred_hand). The
-- new signatures are installed with the functions, after the migrations; the old ones go
-- here (a call with the old arguments would match both).
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint, boolean, boolean);
DROP FUNCTION IF EXISTS harvest._append_closing_events(uuid, text[], jsonb[], text, bigint, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS harvest._apply_decision(
    uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint, harvest.executions, text[],
    integer, text
);
