-- 0091: harvest._lock_superseded_runs takes p_runs, more runs to lock in its id-ordered pass (a
-- start_workflows batch's replacing starts' live priors: locked by each start after the batch
-- held the runs it supersedes, out of id order, they deadlocked with a group commit). The old
-- signature goes here, the new one is installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._lock_superseded_runs(jsonb, bigint[], jsonb[]);
