-- 0015: a decision made on an activity's result appends the result's event with
-- its own, in one row update (functions/decide.sql, _apply_decision's leading
-- events). Drop the old signature so the function file creates the new one
-- instead of an overload.

DROP FUNCTION IF EXISTS harvest._apply_decision(uuid, bigint, jsonb, text, bigint, bigint, integer);
