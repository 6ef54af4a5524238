-- 0078: harvest._fire_slot takes p_room_checked (a backfill that checked the schedule's
-- waiting limit once does not count the waiting slots again for each slot it fires:
-- functions/schedules.sql). The old signature goes here; the new one is installed with the
-- functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._fire_slot(harvest.schedules, timestamptz, text, text, text);
