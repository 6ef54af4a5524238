-- 0097: a run's stack can be read bounded (re-runnable).
--
-- harvest.get_execution_stack listed every open activity, timer and running child of a run: a
-- fan-out of 20,000 activities was 20,000 entries in one answer, read by the dashboard's run
-- page on every view and by GET /workflows/{id}/stack. It takes p_limit (at most that many
-- entries a list, with each list's total; NULL, every entry as before). The old one-argument
-- function goes here; the new one is installed with the functions, after the migrations, and
-- a call with one argument reads as before.
DROP FUNCTION IF EXISTS harvest.get_execution_stack(uuid);
