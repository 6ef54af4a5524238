-- 0014: deciding on an activity's result (functions/activities.sql). The worker's
-- group commit, complete_activities, takes the worker's decisions and returns
-- what each decided; drop the old signature so the function file creates the new
-- one instead of an overload.

DROP FUNCTION IF EXISTS harvest.complete_activities(text, bigint[], bigint[], jsonb[], boolean, double precision);
