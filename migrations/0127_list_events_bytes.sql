-- 0127: harvest.list_events answers each event's size (bytes) and takes p_max_bytes, and
-- harvest.get_history takes p_max_bytes, so the event stream's reader and a catching-up stream
-- read pages bounded in bytes, not only in events (500 events of up to 2 MiB each were a
-- gigabyte a page; one execution's stream read its history whole). The old signatures go
-- here; the new ones are installed with the functions, after the migrations (a call of
-- get_history with up to three arguments reads as before).
DROP FUNCTION IF EXISTS harvest.list_events(bigint, integer, uuid);
DROP FUNCTION IF EXISTS harvest.get_history(uuid, bigint, integer);
