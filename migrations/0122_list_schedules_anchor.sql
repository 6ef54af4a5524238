-- 0122: list_schedules answers each schedule's anchor_at and the engine's now, so `harvest
-- schedule list` (and GET /admin/schedules) shows the next slot computed as `get` computes it
-- while the scheduler has stored none, and marks a stored one in the past as overdue. Its
-- result columns changed: the old signature goes here; the new one is installed with the
-- functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.list_schedules(text, text, integer, boolean);
