-- 0134: expire_tasks answers, for each task it expired, the run's execution_id and the
-- attempt too, so the scanner's log line about an attempt it failed (a worker killed
-- mid-activity) names its run. Its result columns changed: the old signature goes here; the
-- new one is installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.expire_tasks(integer);
