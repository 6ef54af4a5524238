-- 0125: expire_tasks answers, for each task it expired, the run's workflow_type and, for an
-- activity, its name and the error_type it failed with, so the scanner counts the attempts no
-- handler reported in harvest_activity_failed_total (a worker killed mid-activity). Its result
-- columns changed: the old signature goes here; the new one is installed with the functions,
-- after the migrations.
DROP FUNCTION IF EXISTS harvest.expire_tasks(integer);
