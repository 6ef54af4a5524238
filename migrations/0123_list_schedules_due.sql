-- 0123: list_schedules answers each schedule's next_due_at (its stored slot plus its jitter, when
-- the scheduler fires it), so `harvest schedule list` (and GET /admin/schedules) marks a slot
-- overdue once its due time is past, not while its jitter still delays it. Its result columns
-- changed: the old signature goes here; the new one is installed with the functions, after the
-- migrations.
DROP FUNCTION IF EXISTS harvest.list_schedules(text, text, integer, boolean);
