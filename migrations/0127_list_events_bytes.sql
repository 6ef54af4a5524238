-- 0127: harvest.list_events answers each event's size (bytes) and takes p_max_bytes, so the
-- event stream's reader and a resyncing subscriber read pages bounded in bytes, not only in
-- events (500 events of up to 2 MiB each were a gigabyte a page). Its result columns changed:
-- the old signature goes here; the new one is installed with the functions, after the
-- migrations.
DROP FUNCTION IF EXISTS harvest.list_events(bigint, integer, uuid);
