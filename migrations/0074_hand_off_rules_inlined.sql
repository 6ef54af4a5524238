-- 0074: harvest._may_hand_off returns one row (SETOF boolean, a SQL function the planner
-- inlines into the query that reads it) where it returned a boolean from PL/pgSQL
-- (docs/performance.md, "A batch's closes in one pass"). The old signature goes here; the
-- new one is installed with the functions, after the migrations (its callers are all in
-- functions/).
DROP FUNCTION IF EXISTS harvest._may_hand_off(text, integer, text[]);
