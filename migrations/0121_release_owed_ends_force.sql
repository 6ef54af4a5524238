-- 0121: `harvest shard release-owed-ends --force` (and the route's force) is recorded in the
-- audit row: release_owed_child_ends takes p_force, written to its audit details. The old
-- signature goes here; the new one is installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.release_owed_child_ends(integer, integer, boolean, text);
